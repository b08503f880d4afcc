//! The workers this server has seen: who polls for each function and when it last did, and
//! how their completions went. What `GET /v1/workers` and the metrics say of workers beside the
//! tasks the board holds.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use wfhost::tasks::FunctionTasks;
use wfhost_client::wire::{FunctionWorkersJson, PollerJson, WorkersJson};

/// A poller not seen for this long is forgotten.
const FORGET_AFTER: Duration = Duration::from_secs(3600);

/// A poller counts in `wfhost_task_pollers` while it polls, and this long after its last poll.
const RECENT: Duration = Duration::from_secs(60);

/// The most pollers kept per function: a worker fleet that renames itself on every poll does
/// not grow the server without bound.
const MAX_POLLERS: usize = 1_000;

/// The most functions seen when the server was not told which it serves: a client that polls
/// for made-up names does not grow it without bound either.
const MAX_FUNCTIONS: usize = 1_000;

/// Who polls for each function, and how completions went.
#[derive(Debug, Default)]
pub(crate) struct Workers {
    /// The functions the server serves (`--worker-function`), shown even before a worker comes.
    served: Vec<String>,
    seen: Mutex<HashMap<String, Seen>>,
    /// The functions the metrics' gauges have a series of.
    gauged: Mutex<std::collections::HashSet<String>>,
}

#[derive(Debug, Default)]
struct Seen {
    pollers: HashMap<String, Poller>,
    completed: u64,
    failed: u64,
}

#[derive(Debug)]
struct Poller {
    host: String,
    last: SystemTime,
    /// Polls of it that wait now.
    polling: u32,
}

/// A poll that waits: its pollers count as polling until it is dropped.
pub(crate) struct Polling {
    workers: Arc<Workers>,
    functions: Vec<String>,
    name: String,
}

impl Drop for Polling {
    fn drop(&mut self) {
        let now = SystemTime::now();
        let mut seen = self.workers.seen.lock();
        for function in &self.functions {
            if let Some(poller) = seen
                .get_mut(function)
                .and_then(|s| s.pollers.get_mut(&self.name))
            {
                poller.polling = poller.polling.saturating_sub(1);
                poller.last = now;
            }
        }
    }
}

impl Workers {
    pub(crate) fn new(served: Vec<String>) -> Workers {
        Workers {
            served,
            seen: Mutex::default(),
            gauged: Mutex::default(),
        }
    }

    /// Whether `function` is one to keep what is seen of: one the server serves (when it was
    /// told which), or, if not, one of the first [`MAX_FUNCTIONS`] seen.
    fn keeps(&self, seen: &HashMap<String, Seen>, function: &str) -> bool {
        if !self.served.is_empty() {
            return self.served.iter().any(|f| f == function);
        }
        seen.contains_key(function) || seen.len() < MAX_FUNCTIONS
    }

    /// The functions the gauges now cover (`functions`), and those they covered before and no
    /// longer do: their gauges go to zero.
    pub(crate) fn gauges(&self, functions: &[String]) -> Vec<String> {
        let mut gauged = self.gauged.lock();
        let gone = gauged
            .iter()
            .filter(|f| !functions.contains(f))
            .cloned()
            .collect();
        gauged.clear();
        gauged.extend(functions.iter().cloned());
        gone
    }

    /// A poll by worker `name` on `host` for `functions`, polling until the guard is dropped.
    pub(crate) fn polling(
        self: &Arc<Self>,
        functions: &[String],
        name: String,
        host: String,
    ) -> Polling {
        let now = SystemTime::now();
        let mut seen = self.seen.lock();
        for function in functions {
            if !self.keeps(&seen, function) {
                continue;
            }
            let pollers = &mut seen.entry(function.clone()).or_default().pollers;
            if pollers.len() >= MAX_POLLERS && !pollers.contains_key(&name) {
                forget_oldest(pollers);
            }
            let poller = pollers.entry(name.clone()).or_insert_with(|| Poller {
                host: host.clone(),
                last: now,
                polling: 0,
            });
            poller.host.clone_from(&host);
            poller.last = now;
            poller.polling += 1;
        }
        Polling {
            workers: Arc::clone(self),
            functions: functions.to_vec(),
            name,
        }
    }

    /// A completion of a task of `function`, with a result (`ok`) or an error.
    pub(crate) fn completed(&self, function: &str, ok: bool) {
        let mut seen = self.seen.lock();
        if !self.keeps(&seen, function) {
            return;
        }
        let seen = seen.entry(function.to_string()).or_default();
        if ok {
            seen.completed += 1;
        } else {
            seen.failed += 1;
        }
    }

    /// Each function's workers and tasks (`tasks`: the board's), by name.
    pub(crate) fn view(&self, tasks: Vec<FunctionTasks>) -> WorkersJson {
        let now = SystemTime::now();
        let mut seen = self.seen.lock();
        for seen in seen.values_mut() {
            seen.pollers.retain(|_, p| {
                p.polling > 0 || now.duration_since(p.last).unwrap_or_default() < FORGET_AFTER
            });
        }
        let mut tasks: HashMap<String, FunctionTasks> =
            tasks.into_iter().map(|t| (t.function.clone(), t)).collect();
        let mut names: Vec<String> = self.served.clone();
        names.extend(seen.keys().cloned());
        names.extend(tasks.keys().cloned());
        names.sort();
        names.dedup();
        let functions = names
            .into_iter()
            .map(|function| {
                let board = tasks
                    .remove(&function)
                    .unwrap_or_else(|| FunctionTasks::new(function.clone()));
                let (mut pollers, completed, failed) = match seen.get(&function) {
                    Some(seen) => (
                        seen.pollers
                            .iter()
                            .map(|(name, p)| poller_json(name, p))
                            .collect(),
                        seen.completed,
                        seen.failed,
                    ),
                    None => (Vec::new(), 0, 0),
                };
                pollers.sort_by(|a: &PollerJson, b| {
                    b.last_poll_ms
                        .cmp(&a.last_poll_ms)
                        .then(a.name.cmp(&b.name))
                });
                FunctionWorkersJson {
                    function,
                    pollers,
                    waiting: board.waiting,
                    oldest_waiting_ms: board.oldest_waiting.map(millis),
                    in_flight: board.in_flight,
                    completed,
                    failed,
                }
            })
            .collect();
        WorkersJson { functions }
    }

    /// How many pollers of each function poll now or polled in the last minute.
    pub(crate) fn recent(view: &FunctionWorkersJson) -> u64 {
        let now = millis(
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default(),
        );
        view.pollers
            .iter()
            .filter(|p| p.polling || now.saturating_sub(p.last_poll_ms) < millis(RECENT))
            .count() as u64
    }
}

fn forget_oldest(pollers: &mut HashMap<String, Poller>) {
    let oldest = pollers
        .iter()
        .filter(|(_, p)| p.polling == 0)
        .min_by_key(|(_, p)| p.last)
        .map(|(name, _)| name.clone());
    if let Some(name) = oldest {
        pollers.remove(&name);
    }
}

fn poller_json(name: &str, poller: &Poller) -> PollerJson {
    let ms = millis(
        poller
            .last
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default(),
    );
    PollerJson {
        name: name.to_string(),
        host: poller.host.clone(),
        last_poll: crate::http::routes::rfc3339(poller.last),
        last_poll_ms: ms,
        polling: poller.polling > 0,
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_kept_is_bounded() {
        // Told what it serves: other names are not kept.
        let served = Arc::new(Workers::new(vec!["a.served".into()]));
        let made_up: Vec<String> = (0..100).map(|n| format!("made.up{n}")).collect();
        drop(served.polling(&made_up, "w".into(), "m".into()));
        served.completed("made.up1", true);
        let names: Vec<String> = served
            .view(Vec::new())
            .functions
            .into_iter()
            .map(|f| f.function)
            .collect();
        assert_eq!(names, ["a.served"]);
        // Not told: the first MAX_FUNCTIONS names, no more.
        let open = Arc::new(Workers::new(Vec::new()));
        let many: Vec<String> = (0..MAX_FUNCTIONS + 50).map(|n| format!("f{n}")).collect();
        for chunk in many.chunks(64) {
            drop(open.polling(chunk, "w".into(), "m".into()));
        }
        assert_eq!(open.view(Vec::new()).functions.len(), MAX_FUNCTIONS);
        // A function the gauges covered and no longer do goes to zero.
        assert!(open.gauges(&["x".into(), "y".into()]).is_empty());
        assert_eq!(open.gauges(&["y".into()]), ["x"]);
    }

    #[test]
    fn pollers_are_seen_while_they_poll_and_after() {
        let workers = Arc::new(Workers::new(vec!["a.charge".into(), "b.served".into()]));
        let functions = ["a.charge".to_string()];
        let poll = workers.polling(&functions, "w1".into(), "m1".into());
        let view = workers.view(Vec::new());
        let names: Vec<&str> = view.functions.iter().map(|f| f.function.as_str()).collect();
        assert_eq!(names, ["a.charge", "b.served"]);
        let charge = &view.functions[0];
        assert_eq!(charge.pollers.len(), 1);
        assert!(charge.pollers[0].polling);
        assert_eq!(
            (
                charge.pollers[0].name.as_str(),
                charge.pollers[0].host.as_str()
            ),
            ("w1", "m1")
        );
        assert_eq!(Workers::recent(charge), 1);
        drop(poll);
        workers.completed("a.charge", true);
        workers.completed("a.charge", false);
        workers.completed("a.charge", true);
        let mut board = FunctionTasks::new("a.charge".into());
        board.waiting = 3;
        board.in_flight = 1;
        board.oldest_waiting = Some(Duration::from_millis(1500));
        let view = workers.view(vec![board]);
        let charge = &view.functions[0];
        assert!(!charge.pollers[0].polling);
        assert_eq!(Workers::recent(charge), 1, "polled within the minute");
        assert_eq!(
            (
                charge.waiting,
                charge.in_flight,
                charge.oldest_waiting_ms,
                charge.completed,
                charge.failed
            ),
            (3, 1, Some(1500), 2, 1)
        );
    }
}
