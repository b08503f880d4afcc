//! Journaling one step: its record, the host's decisions about its yields (the due time of a
//! sleep, the number of a message to a durable workflow, the pid and id of a child), the ops
//! that write them, and the hold that keeps the step's effects back until they are on disk. The
//! decisions reach the yields' handlers as notes on the yields themselves ([`Hold::note`]).

use std::sync::Arc;

use wfcontract::{Command, EventKind, SendRequest, SpawnRequest, Status, StepOutput};
use wfhost_scheduler::{FailureKind, Hold, Note, Process as _};

use super::DurableProcess;
use crate::durable::now_nanos;
use crate::durable::record::StepRecord;
use crate::durable::store::{Ending, NewMessage, NewStep, NewWorkflow, Op};
use crate::durable::writer::{Done, Submission};
use crate::wasm::reads::Reads;

/// What journaling a step's yields decided: the ops that write it, and how many of the leading
/// yields go before the step is on disk.
struct Decided {
    ops: Vec<Op>,
    early: usize,
}

impl DurableProcess {
    /// Journals the step that answered `out`, holding its effects until it is on disk (see
    /// [`Process::journal`](wfhost_scheduler::Process::journal)).
    pub(super) fn journal_step(&mut self, out: &StepOutput, hold: &Hold<'_>) {
        self.note_again(hold);
        if std::mem::take(&mut self.synthetic) {
            return;
        }
        let rearmed = std::mem::take(&mut self.rearmed);
        let seq = self.seq + 1;
        let now = now_nanos();
        let mut record = self.record(out, rearmed);
        let Decided { mut ops, early } = self.decide(&mut record, rearmed, seq, now, hold);
        self.normalize(&mut record.output.yields);
        let calls_done = self.calls_done(&record);
        let events = std::mem::take(&mut record.events);
        self.track(&events, &record);
        record.events = events;
        let mut step = step_of(self.pid.0, seq, now / 1_000_000, &record);
        step.calls_done = calls_done;
        ops.push(Op::Step(step));
        self.since_snapshot += record.weight();
        match ending_of(&out.status) {
            Some(ending) => {
                self.ended = true;
                ops.push(Op::End {
                    num: self.pid.0,
                    ending,
                    at: now / 1_000_000,
                });
            }
            None => {
                if let Some(snapshot) = self.snapshot_if_due(seq, out) {
                    ops.push(Op::Snapshot(snapshot));
                }
            }
        }
        self.seq = seq;
        self.hold_for(ops, hold, early);
    }

    /// The host-function calls whose answers `record` takes, or that it gives up (`forget`), by
    /// tag: their tasks on a store's board go with the step.
    fn calls_done(&self, record: &StepRecord) -> Vec<u64> {
        let is_call = |tag: &wfcontract::Tag| {
            self.pending
                .get(tag)
                .is_some_and(|pending| pending.command.call().is_some())
        };
        let answered = record
            .events
            .iter()
            .filter(|e| e.kind == EventKind::YieldComplete && is_call(&e.tag))
            .map(|e| e.tag.0);
        let forgotten = record
            .output
            .yields
            .iter()
            .filter_map(|y| match &y.command {
                Command::Forget(tag) if is_call(tag) => Some(tag.0),
                _ => None,
            });
        answered.chain(forgotten).collect()
    }

    /// Notes the sends to the host re-armed at recovery (by their position among the re-armed
    /// yields, which lead the step's output): what they sent before the restart may be kept
    /// already (whether the step is journaled or answered from the journal alone).
    fn note_again(&mut self, hold: &Hold<'_>) {
        for index in self.again.drain(..) {
            hold.note(index, Note::Again);
        }
    }

    /// The record of the step that answered `out`: its events, reads and answer (without the
    /// `rearmed` yields it re-made at recovery, which are not the guest's).
    fn record(&mut self, out: &StepOutput, rearmed: usize) -> StepRecord {
        let reads = match self.inner.set_reads(Reads::Record(Vec::new())) {
            Reads::Record(reads) => reads,
            _ => Vec::new(),
        };
        let record = StepRecord {
            events: std::mem::take(&mut self.events),
            reads,
            output: StepOutput {
                status: out.status.clone(),
                yields: out.yields[rearmed..].to_vec(),
                receive: out.receive,
            },
            dues: Vec::new(),
            sent: Vec::new(),
            spawned: Vec::new(),
        };
        self.note_reads(&record.reads);
        record
    }

    /// The host's decisions about the step's yields, noted in `record` and on the yields
    /// (`hold`), and the ops that write what they start: a message to a durable workflow, a
    /// child, a cancel.
    fn decide(
        &mut self,
        record: &mut StepRecord,
        rearmed: usize,
        seq: u64,
        now: u64,
        hold: &Hold<'_>,
    ) -> Decided {
        let mut decided = Decided {
            ops: Vec::new(),
            early: 0,
        };
        let yields = std::mem::take(&mut record.output.yields);
        for (index, y) in yields.iter().enumerate() {
            // A yield the process may not make is refused at dispatch, the same way every time:
            // nothing to prepare for it.
            if self.inner.check(&y.command).is_err() {
                continue;
            }
            match &y.command {
                Command::Sleep(duration) => {
                    let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
                    record.dues.push((y.tag, now.saturating_add(nanos)));
                }
                Command::Send(send)
                    if self.durable.ids.contains(send.to)
                        || self.durable.runs_elsewhere(send.to) =>
                {
                    let number = self.journal_send(send, &mut decided.ops);
                    record.sent.push((y.tag, number));
                    hold.note(rearmed + index, Note::Numbered(number));
                    // The leading messages to journaled workflows go before this step is on
                    // disk (see `hold_for`).
                    if rearmed == 0 && index == decided.early {
                        decided.early += 1;
                    }
                }
                Command::Spawn(spawn) => {
                    let at = now / 1_000_000;
                    if let Some((child, id, module)) =
                        self.journal_spawn(spawn, seq, index, at, &mut decided.ops)
                    {
                        record.spawned.push((y.tag, child));
                        hold.note(rearmed + index, Note::Child(child, id, module));
                    }
                }
                Command::Cancel(target) if self.durable.ids.contains(*target) => {
                    decided.ops.push(Op::Cancel { num: target.0 });
                }
                _ => {}
            }
        }
        record.output.yields = yields;
        decided
    }

    /// Writes a message to a journaled workflow (in `ops`): its number.
    fn journal_send(&self, send: &SendRequest, ops: &mut Vec<Op>) -> u64 {
        let number = self.durable.next_message();
        ops.push(Op::Message(NewMessage {
            id: number,
            receiver: send.to.0,
            sender: self.pid.0,
            payload: postcard::to_allocvec(&send.message).unwrap_or_default(),
            local: self.durable.ids.contains(send.to),
        }));
        number
    }

    /// Writes the start of a child (in `ops`), spawned by yield `index` of step `seq`: its pid,
    /// id and module hash, or `None` when no child is started (its module is not loaded: the spawn fails at
    /// dispatch).
    fn journal_spawn(
        &self,
        spawn: &SpawnRequest,
        seq: u64,
        index: usize,
        at: u64,
        ops: &mut Vec<Op>,
    ) -> Option<(wfcontract::Pid, Arc<str>, Arc<str>)> {
        let scheduler = self.durable.scheduler()?;
        let own = self.inner.module_name();
        let (module, module_name) = match &spawn.module {
            Some(name) if name != own => (self.durable.module_hash(name)?, name.clone()),
            _ => (self.module.to_string(), own.to_string()),
        };
        let child = scheduler.reserve_pid();
        let id: Arc<str> = format!("{}/{seq}.{index}", self.id).into();
        let hash: Arc<str> = Arc::from(module.as_str());
        ops.push(Op::Start(NewWorkflow {
            num: child.0,
            id: id.to_string(),
            parent: Some(self.pid.0),
            module,
            module_name,
            entry: spawn.entry.clone(),
            input: postcard::to_allocvec(&spawn.input).unwrap_or_default(),
            started: at,
            trace: self.run_traceparent(),
        }));
        Some((child, id, hash))
    }

    /// Hands `ops` to the journal's writer and holds the step's effects until they are on
    /// disk; the first `early` yields go at once.
    fn hold_for(&mut self, ops: Vec<Op>, hold: &Hold<'_>, early: usize) {
        let release = hold.hold();
        if let Err(error) = self.durable.writer.submit(Submission {
            ops,
            done: Done::Release(release, self.pid),
        }) {
            // Never released: the step's effects must not happen unjournaled. The process stops
            // where its journal ends.
            tracing::error!(pid = %self.pid, workflow = %self.id, "a step could not be journaled: {error}");
            self.durable.store_failed(&error, &[self.pid]);
            return;
        }
        // A message to a journaled workflow is delivered now, before this step is on disk: the
        // receiver's step that takes it is queued to the one writer after this one, and batches
        // commit in order, so a crash that loses this step loses what the receiver did with it
        // too (and a failed write stops both). What leaves the journal (host calls, messages to
        // the host, results) still waits for the commit of the step that makes it, which comes
        // after every step it depends on.
        // Only while nothing the guest yielded before it waits: its yields take effect in the
        // order it made them (a cancel before a message, a message to the host before one to a
        // workflow that answers it).
        hold.dispatch_first(early);
    }
}

/// The step `seq` of workflow `num`, run at `at` (milliseconds), as the store writes it: the
/// messages it took go, and so does a cancel it took.
fn step_of(num: u64, seq: u64, at: u64, record: &StepRecord) -> NewStep {
    let consumed = record
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Message && e.tag.0 != 0)
        .map(|e| e.tag.0)
        .collect();
    let took_cancel = record.events.iter().any(|e| e.kind == EventKind::Cancel);
    NewStep {
        num,
        seq,
        at,
        record: postcard::to_allocvec(record).unwrap_or_default(),
        consumed,
        took_cancel,
        calls_done: Vec::new(),
    }
}

/// How a step that answered `status` ended its workflow, if it did.
fn ending_of(status: &Status) -> Option<Ending> {
    match status {
        Status::Done(result) => Some(Ending::Done(
            postcard::to_allocvec(result).unwrap_or_default(),
        )),
        Status::Failed(message) => Some(Ending::Failed {
            kind: FailureKind::Failed.name().into(),
            message: message.clone(),
        }),
        Status::Cancelled(message) => Some(Ending::Failed {
            kind: FailureKind::Cancelled.name().into(),
            message: message.clone(),
        }),
        _ => None,
    }
}
