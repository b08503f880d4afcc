//! What a workflow waits for now, read from its journal: [`Client::waits`].

use std::collections::BTreeMap;

use wfcontract::{Command, EventKind, Yield};

use super::Client;
use crate::error::Result;

/// Steps read at a time.
const WINDOW: usize = super::MAX_PAGE;

/// A command a workflow yielded that nothing has answered yet.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct OpenYield {
    /// The step that yielded it.
    pub step: u64,
    /// When that step ran, in milliseconds since the Unix epoch.
    pub at: u64,
    /// The command, with its tag.
    pub yielded: Yield,
}

impl OpenYield {
    /// When its timer fires, in milliseconds since the Unix epoch, for a sleep (counted from
    /// when the step that asked for it ran) or a sleep until a time.
    pub fn fires_at(&self) -> Option<u64> {
        match &self.yielded.command {
            Command::Sleep(duration) => Some(
                self.at
                    .saturating_add(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)),
            ),
            Command::SleepUntil(nanos) => Some(nanos / 1_000_000),
            _ => None,
        }
    }
}

/// What a workflow waits for ([`Client::waits`]), as of the last step its journal holds.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Waits {
    /// The steps its journal holds.
    pub steps: u64,
    /// The commands it yielded that no event has answered (nor it forgot), in the order it
    /// yielded them: timers, children it joins, host functions it called, sends not yet
    /// delivered.
    pub open: Vec<OpenYield>,
    /// Whether it waits for a message: its last step asked for messages and it has not ended.
    pub message: bool,
}

/// Follows a journal step by step, keeping the yields not yet answered.
#[derive(Debug, Default)]
struct Follow {
    open: BTreeMap<u64, OpenYield>,
    steps: u64,
    message: bool,
}

impl Follow {
    fn step(&mut self, step: &super::HistoryStep) {
        for event in &step.events {
            if event.kind == EventKind::YieldComplete {
                self.open.remove(&event.tag.0);
            }
        }
        for y in &step.yields {
            match &y.command {
                Command::Forget(tag) => {
                    self.open.remove(&tag.0);
                }
                command if command.kind().expects_completion() => {
                    self.open.insert(
                        y.tag.0,
                        OpenYield {
                            step: step.seq,
                            at: step.at,
                            yielded: y.clone(),
                        },
                    );
                }
                _ => {}
            }
        }
        self.steps = step.seq;
        self.message = step.receive > 0 && !step.status.is_final();
    }
}

impl Client {
    /// What workflow `id` waits for now: the commands it yielded that nothing has answered
    /// yet, and whether it waits for a message. Read from its whole journal, 10,000 steps at a
    /// time (the web UI asks for this rather than reading a long history itself). For a
    /// finished workflow, what it waited for when it ended.
    pub fn waits(&self, id: &str) -> Result<Waits> {
        let mut follow = Follow::default();
        let mut after: Option<String> = None;
        loop {
            let page = self.history(id, after.as_deref(), WINDOW)?;
            for step in &page.items {
                follow.step(step);
            }
            match page.next {
                Some(next) if !page.items.is_empty() => after = Some(next),
                _ => break,
            }
        }
        Ok(Waits {
            steps: follow.steps,
            open: follow.open.into_values().collect(),
            message: follow.message,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use wfcontract::{Event, Payload, Pid, Status, Tag};

    use super::*;
    use crate::client::HistoryStep;

    fn step(
        seq: u64,
        events: Vec<Event>,
        yields: Vec<(u64, Command)>,
        receive: u32,
    ) -> HistoryStep {
        HistoryStep {
            seq,
            at: seq * 1_000,
            events,
            reads: vec![],
            yields: yields
                .into_iter()
                .map(|(tag, command)| Yield {
                    tag: Tag(tag),
                    command,
                })
                .collect(),
            status: Status::Wait,
            receive,
            record: vec![],
        }
    }

    #[test]
    fn a_yield_waits_until_answered_or_forgotten() {
        let mut follow = Follow::default();
        follow.step(&step(
            1,
            vec![],
            vec![
                (1, Command::Sleep(Duration::from_secs(5))),
                (2, Command::Join(Pid(9))),
                (3, Command::Now),
            ],
            0,
        ));
        assert_eq!(follow.open.keys().copied().collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(follow.open[&1].fires_at(), Some(6_000));
        assert_eq!(follow.open[&2].fires_at(), None);
        follow.step(&step(
            2,
            vec![Event::completion(
                Tag(3),
                Ok(Payload::json_bytes(b"1".to_vec())),
            )],
            vec![(0, Command::Forget(Tag(1)))],
            1,
        ));
        assert_eq!(follow.open.keys().copied().collect::<Vec<_>>(), [2]);
        assert_eq!(follow.open[&2].step, 1);
        assert!(follow.message);
        let mut last = step(3, vec![], vec![], 1);
        last.status = Status::Done(Payload::json_bytes(b"1".to_vec()));
        follow.step(&last);
        assert_eq!((follow.steps, follow.message), (3, false));
    }
}
