//! Shared by the scale tests: many processes waiting in `recv()`, then messaged.

use std::time::Duration;

use wfhost::{Host, Payload, Run};

const PATIENCE: Duration = Duration::from_secs(300);

/// Spawns processes blocked in `recv()` until `count` run or the host refuses one.
pub fn spawn_waiting(host: &Host, count: usize) -> (Vec<Run>, Option<wfhost::Error>) {
    let mut runs = Vec::with_capacity(count);
    for _ in 0..count {
        // `collect(1)`: waits for one message and returns it in a list.
        match host.spawn("probe", "collect", Payload::to_json(&1u32).unwrap()) {
            Ok(run) => runs.push(run),
            Err(error) => return (runs, Some(error)),
        }
    }
    (runs, None)
}

/// Messages every process its index and checks each answers with exactly that.
pub fn message_all_and_check(host: &Host, runs: Vec<Run>) {
    for (n, run) in runs.iter().enumerate() {
        host.send(run.pid(), Payload::to_json(&n).unwrap()).unwrap();
    }
    for (n, run) in runs.into_iter().enumerate() {
        let result = run.wait_timeout(PATIENCE).expect("finished").unwrap();
        assert_eq!(result.decode::<Vec<usize>>().unwrap(), [n]);
    }
}
