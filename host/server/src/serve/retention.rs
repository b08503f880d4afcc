//! A [`Server`](super::Server)'s retention ([`Server::retain`](super::Server::retain)): a thread
//! that prunes the store every so often while the server serves with a host.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use wfhost::Grants;
use wfhost::Host;
use wfhost::Result;
use wfhost::{Client, PruneQuery};

/// The pruning thread; stopped and joined when dropped.
pub(super) struct Retention {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// How long between two looks when workflows are kept `age`: a tenth of it, between a second
/// and an hour.
fn interval(age: Duration) -> Duration {
    (age / 10).clamp(Duration::from_secs(1), Duration::from_secs(3_600))
}

/// Starts pruning what finished more than `age` ago, through `host`.
pub(super) fn start(host: &Host, age: Duration) -> Result<Retention> {
    let client = Client::serving(host, Grants::default())?;
    let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
    let thread = std::thread::Builder::new()
        .name("wfhost-retention".into())
        .spawn(move || prune_until_stopped(&client, age, &stopped))
        .map_err(|e| {
            wfhost::Error::new(
                wfhost::ErrorKind::Config,
                format!("cannot start the retention thread: {e}"),
            )
        })?;
    Ok(Retention {
        stop: Some(stop),
        thread: Some(thread),
    })
}

/// How long one round prunes before it looks whether the server stops.
const ROUND: Duration = Duration::from_secs(5);

fn prune_until_stopped(client: &Client, age: Duration, stopped: &Receiver<()>) {
    loop {
        let query = PruneQuery::finished_more_than(age);
        let more = match client.prune_until(&query, Some(Instant::now() + ROUND)) {
            Ok(pruned) => {
                if pruned.trees > 0 {
                    tracing::info!(
                        trees = pruned.trees,
                        workflows = pruned.workflows,
                        left = pruned.left,
                        "removed workflows that finished more than {age:?} ago"
                    );
                }
                pruned.more
            }
            Err(error) => {
                tracing::warn!("removing finished workflows: {}", error.message());
                false
            }
        };
        let wait = if more { Duration::ZERO } else { interval(age) };
        match stopped.recv_timeout(wait) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}

impl Drop for Retention {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::interval;
    use std::time::Duration;

    #[test]
    fn retention_looks_a_tenth_of_its_age_between_a_second_and_an_hour() {
        assert_eq!(interval(Duration::from_secs(2)), Duration::from_secs(1));
        assert_eq!(interval(Duration::from_secs(600)), Duration::from_secs(60));
        assert_eq!(
            interval(Duration::from_secs(30 * 86_400)),
            Duration::from_secs(3_600)
        );
    }
}
