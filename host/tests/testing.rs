//! `wfhost::testing` on the probe's workflows: children spawned, joined and messaged under the
//! virtual clock; a cancel at a chosen time and the clean-up after it; `now` from the virtual
//! clock and `random` from the seed; a run where nothing can come says what each process waits
//! for.

use std::time::{Duration, SystemTime};

use serde_json::{json, Value};
use wfhost::testing::{TestEnv, What};
use wfhost_test_programs::PROBE;

fn probe() -> TestEnv {
    TestEnv::new(PROBE).unwrap()
}

#[test]
fn children_are_spawned_joined_and_messaged_in_order() {
    let run = probe().run("nest", &3u32).unwrap();
    assert_eq!(run.result::<u32>().unwrap(), 3);
    let spawned: Vec<u64> = run
        .history
        .iter()
        .filter_map(|h| match &h.what {
            What::Spawned { child, .. } => Some(child.0),
            _ => None,
        })
        .collect();
    assert_eq!(spawned, [2, 3, 4]);
    assert_eq!(run.elapsed, Duration::ZERO);

    let run = probe().run("ordered", &5u32).unwrap();
    assert_eq!(run.result::<Vec<u32>>().unwrap(), [0, 1, 2, 3, 4]);

    // An abandoned join keeps the child's result for the next: the 20 ms race is lost by the
    // child's 60 s nap, and the second join waits the rest of it, by the virtual clock.
    let run = probe().run("impatient_join", &60_000u64).unwrap();
    assert_eq!(
        run.result::<Value>().unwrap(),
        json!({ "first": "timed out", "second": "rested" })
    );
    assert_eq!(run.elapsed, Duration::from_secs(60));
}

#[test]
fn a_cancel_at_a_chosen_time_runs_the_clean_up() {
    let run = probe()
        .cancel_at(Duration::from_secs(3_600))
        .run("cleanup_on_cancel", &())
        .unwrap();
    assert_eq!(run.result::<String>().unwrap(), "cleaned up");
    // The clean-up's 10 ms sleep, after the cancel an hour in.
    assert_eq!(
        run.elapsed,
        Duration::from_secs(3_600) + Duration::from_millis(10)
    );
    let logs: Vec<String> = run.logs().into_iter().map(|(_, line)| line).collect();
    assert_eq!(logs, ["waiting for messages", "cleanup ran"]);
}

#[test]
fn now_is_the_virtual_clock_and_random_follows_the_seed() {
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000_000);
    let run = probe()
        .starting_at(start)
        .run("time_and_chance", &())
        .unwrap();
    assert_eq!(
        run.result::<Value>().unwrap(),
        json!({ "unix_seconds": 2_000_000_000u64, "randoms_differ": true })
    );
}

#[test]
fn a_run_with_nothing_left_to_come_says_what_waits() {
    let error = probe().run("wait_message", &600_000u64).map(|_| ()).err();
    // It waits ten minutes for a message, then ends with none: not stuck.
    assert!(error.is_none(), "{error:?}");
    let error = probe().run("strict_recv", &()).unwrap_err();
    assert!(
        error
            .message()
            .contains("every process waits and nothing is due"),
        "{error}"
    );
    assert!(
        error.message().contains("process 1 (strict_recv)"),
        "{error}"
    );
    // A workflow that outlives the limit stops there, by the virtual clock.
    let error = probe()
        .limit(Duration::from_secs(86_400))
        .run("nap", &(200u64 * 86_400_000))
        .unwrap_err();
    assert!(error.message().contains("had not ended"), "{error}");
}
