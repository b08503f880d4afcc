//! The reminders workflow under `wfhost::testing`: thirty days of reminders, each at the exact
//! virtual time it is due, in well under a second of real time; a message on the way is ignored
//! without moving the schedule; "done" stops it.

use std::time::{Duration, Instant};

use reminders::DAY;
use wfhost::testing::{TestEnv, What};
use wfhost_test_programs::REMINDERS;

fn env() -> TestEnv {
    TestEnv::new(REMINDERS)
        .unwrap()
        .function("reminder_text", |day: u32| {
            Ok(format!("day {day}: water the plants"))
        })
}

#[test]
fn thirty_days_of_reminders_in_a_moment() {
    let env = env();
    let started = Instant::now();
    let run = env.run("remind", &30u32).unwrap();
    let took = started.elapsed();
    assert_eq!(run.result::<u32>().unwrap(), 30);
    assert_eq!(run.elapsed, DAY * 30);
    let expected: Vec<(Duration, String)> = (1..=30)
        .map(|day| (DAY * day, format!("day {day}: water the plants")))
        .collect();
    assert_eq!(run.sent_to_host::<String>().unwrap(), expected);
    // One call of the host function a day, each just before its reminder.
    let calls: Vec<Duration> = run.calls("reminder_text").iter().map(|c| c.0).collect();
    assert_eq!(calls, (1..=30).map(|day| DAY * day).collect::<Vec<_>>());
    // Printed, not asserted: the speed is recorded in BENCHMARKS.md.
    println!("30 virtual days in {took:?} of real time");
}

#[test]
fn a_message_on_the_way_is_ignored_and_done_stops_it() {
    let run = env()
        .send_at(DAY * 5 / 2, &"hello")
        .send_at(DAY * 10 + Duration::from_secs(60), &"done")
        .run("remind", &30u32)
        .unwrap();
    assert_eq!(run.result::<u32>().unwrap(), 10);
    assert_eq!(run.elapsed, DAY * 10 + Duration::from_secs(60));
    let sent: Vec<Duration> = run
        .sent_to_host::<String>()
        .unwrap()
        .into_iter()
        .map(|(at, _)| at)
        .collect();
    assert_eq!(sent, (1..=10).map(|day| DAY * day).collect::<Vec<_>>());
    assert_eq!(
        run.logs(),
        [(DAY * 5 / 2, "ignored a message: hello".to_string())]
    );
    // The history has each message taken, at the time it came.
    let received: Vec<Duration> = run
        .history
        .iter()
        .filter(|h| matches!(h.what, What::Received { .. }))
        .map(|h| h.at)
        .collect();
    assert_eq!(received, [DAY * 5 / 2, DAY * 10 + Duration::from_secs(60)]);
}

#[test]
fn a_missing_host_function_fails_the_workflow_and_a_run_that_waits_for_nothing_says_so() {
    // Without `reminder_text`, the first reminder's call fails, and so does the workflow.
    let run = TestEnv::new(REMINDERS)
        .unwrap()
        .run("remind", &3u32)
        .unwrap();
    let error = run.result::<u32>().unwrap_err();
    assert!(
        error
            .message()
            .contains("no host function named 'reminder_text'"),
        "{error}"
    );
    assert_eq!(run.elapsed, DAY);
    // An entry point that does not exist, and input it refuses, are errors of the run.
    let error = env().run("nope", &1u32).unwrap_err();
    assert!(error.message().contains("nope"), "{error}");
    let error = env().run("remind", &"thirty").unwrap_err();
    assert!(error.message().contains("did not start"), "{error}");
}
