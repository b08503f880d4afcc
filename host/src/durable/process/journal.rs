//! Journaling one step: its record, the host's decisions about its yields (the due time of a
//! sleep, the number of a message to a durable workflow, the pid and id of a child), the ops
//! that write them, and the hold that keeps the step's effects back until they are on disk. The
//! decisions reach the yields' handlers as notes on the yields themselves ([`Hold::note`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use wfcontract::{Command, EventKind, SendRequest, SpawnRequest, Status, StepOutput};
use wfhost_scheduler::{FailureKind, Hold, Note, Process as _};

use super::DurableProcess;
use crate::durable::now_nanos;
use crate::durable::record::StepRecord;
use crate::durable::store::{Ending, NewMessage, NewStep, NewWorkflow, Op};
use crate::durable::writer::{Done, Submission};
use crate::wasm::reads::Reads;

/// The most steps of one workflow that go on before they are on disk
/// ([`DurableProcess::go_on`]).
const MAX_AHEAD: u32 = 32;

/// Past this many entries queued for the writer, no step goes on before its commit: a tree of
/// workflows, each within [`MAX_AHEAD`], cannot pile up unwritten steps.
const MAX_QUEUED: usize = 16_384;

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
        // A step all of whose effects stay inside the journal, and that does not end the
        // workflow, is not held at all: the workflow goes on to its next step while this one is
        // written (see `go_on`).
        let inside = rearmed == 0 && early == out.yields.len() && !self.ended;
        match inside {
            true => self.go_on(ops, hold, early),
            false => self.hold_for(ops, hold, early),
        }
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
            // The leading yields that stay inside the journal go before this step is on disk
            // (see `hold_for`).
            let inside = self.decide_one(record, y, (rearmed, seq, index, now), hold, &mut decided);
            if inside && rearmed == 0 && index == decided.early {
                decided.early += 1;
            }
        }
        record.output.yields = yields;
        decided
    }

    /// The host's decision about yield `index` of step `seq` (after `rearmed` re-armed
    /// yields), made at `now`: whether what it does stays inside the journal, so that it may
    /// take effect before the step is on disk. It does if whatever it changes is journaled
    /// after this step, by this host's one writer, so that no crash keeps the effect and loses
    /// the step: a wait (a sleep, a join, the clock, random bits), a message to a journaled
    /// workflow, a child, a cancel of a workflow here, a yield refused at dispatch. What leaves
    /// the journal (a host call, a log line, a message to the host or to a process with no
    /// journal) and a forget (which may stop a call's task) wait for the commit.
    fn decide_one(
        &mut self,
        record: &mut StepRecord,
        y: &wfcontract::Yield,
        (rearmed, seq, index, now): (usize, u64, usize, u64),
        hold: &Hold<'_>,
        decided: &mut Decided,
    ) -> bool {
        // A yield the process may not make is refused at dispatch, the same way every time:
        // nothing to prepare for it. Except a call: whether one is refused can change by then
        // (it waits for a host that serves its function, as many as a workflow may), and it
        // then leaves the journal.
        if self.inner.check(&y.command).is_err() {
            return y.command.call().is_none();
        }
        match &y.command {
            Command::Sleep(duration) => {
                let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
                record.dues.push((y.tag, now.saturating_add(nanos)));
                true
            }
            Command::SleepUntil(_) | Command::Join(_) | Command::Now | Command::Random => true,
            Command::Send(send)
                if self.durable.ids.contains(send.to) || self.durable.runs_elsewhere(send.to) =>
            {
                let number = self.journal_send(send, &mut decided.ops);
                record.sent.push((y.tag, number));
                hold.note(rearmed + index, Note::Numbered(number));
                true
            }
            Command::Spawn(spawn) => {
                let at = now / 1_000_000;
                let journaled = self.journal_spawn(spawn, seq, index, at, &mut decided.ops);
                // A spawn journaled no child for waits (its module is not loaded now: it fails
                // at dispatch, unless the module is loaded by then).
                let Some((child, id, module)) = journaled else {
                    return false;
                };
                record.spawned.push((y.tag, child));
                hold.note(rearmed + index, Note::Child(child, id, module));
                true
            }
            Command::Cancel(target) if self.durable.ids.contains(*target) => {
                // A confined workflow may cancel only its own children: another cancel is
                // refused at dispatch, and must not be journaled either, or a restart would
                // deliver it.
                if self.may_reach(*target) {
                    decided.ops.push(Op::Cancel { num: target.0 });
                }
                true
            }
            _ => false,
        }
    }

    /// Whether it may act on process `target`: any process if its grants say so, else only its
    /// own children (as the scheduler's handlers decide at dispatch).
    fn may_reach(&self, target: wfcontract::Pid) -> bool {
        self.inner.reaches_any_process()
            || self
                .durable
                .scheduler()
                .and_then(|scheduler| scheduler.parent_of(target))
                == Some(Some(self.pid))
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

    /// Hands `ops`, the journal of a step whose effects all stay inside the journal, to the
    /// writer without holding the step: its yields are acted on, and the workflow takes its
    /// next step, before it is on disk. That is safe because everything the step starts is
    /// journaled after it by the same writer, and batches commit in order: a crash that loses
    /// this step loses what followed from it too, and a failed write stops every workflow whose
    /// steps it lost (the store takes nothing after its first failure). What a later step sends
    /// out of the journal waits for that step's own commit, which comes after this one's.
    ///
    /// At most [`MAX_AHEAD`] such steps of one workflow wait for the writer at once, and none
    /// go on while [`MAX_QUEUED`] entries are queued: past that the step is held as any other,
    /// so workflows that never leave the journal cannot outrun the disk.
    fn go_on(&mut self, ops: Vec<Op>, hold: &Hold<'_>, early: usize) {
        let ahead = self.ahead.get_or_insert_with(Default::default);
        // Only this process adds (one step at a time), the writer takes away: a load suffices.
        // And however many workflows go on, the writer's queue stays bounded.
        if ahead.load(Ordering::Acquire) >= MAX_AHEAD || self.durable.writer.pending() >= MAX_QUEUED
        {
            return self.hold_for(ops, hold, early);
        }
        ahead.fetch_add(1, Ordering::AcqRel);
        let submitted = self.durable.writer.submit(Submission {
            ops,
            done: Done::Ahead(Arc::clone(ahead), self.pid),
        });
        if let Err(error) = submitted {
            ahead.fetch_sub(1, Ordering::AcqRel);
            // Held and never released: nothing of it may happen unjournaled. The process stops
            // where its journal ends.
            drop(hold.hold());
            tracing::error!(pid = %self.pid, workflow = %self.id, "a step could not be journaled: {error}");
            self.durable.store_failed(&error, &[self.pid]);
        }
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
