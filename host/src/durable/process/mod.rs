//! A durable workflow: a wasm process whose every step is journaled before its effects happen,
//! and which, after a restart, starts from its snapshot, replays the journal after it and re-arms
//! what it was waiting for (`replay.rs`).

mod replay;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use wfcontract::{
    Command, CommandError, Event, EventKind, Payload, Pid, Status, StepOutput, Tag, Yield,
};
use wfhost_scheduler::{
    Events, FailureKind, Hold, InitContext, Process, ProcessError, ProcessResult, Readiness,
    WakerSource,
};

use super::record::StepRecord;
use super::snapshot::{Counts, SavedWorkflow};
use super::store::{Ending, NewMessage, NewSnapshot, NewStep, NewWorkflow, Op};
use super::writer::{Done, Entry};
use super::{ChildStart, Durable};
use crate::wasm::reads::Reads;
use crate::wasm::WasmProcess;

/// Nanoseconds since the Unix epoch.
pub(crate) fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_millis() -> u64 {
    unix_nanos() / 1_000_000
}

/// A yield not yet answered, with what the host decided about it when it was journaled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Pending {
    command: Command,
    due: Option<u64>,
    sent: Option<u64>,
    spawned: Option<Pid>,
}

/// A wasm process with a journal.
pub(crate) struct DurableProcess {
    inner: WasmProcess,
    durable: Arc<Durable>,
    /// Its workflow id.
    id: Arc<str>,
    /// Its module's hash, which its children without a module name share.
    module: Arc<str>,
    pid: Pid,
    /// Steps journaled (or replayed) so far.
    seq: u64,
    /// After a restart, its snapshot, until `init` starts it from there.
    saved: Option<SavedWorkflow>,
    /// The journal to replay before its first live step (recovery), oldest first: after its
    /// snapshot, or all of it.
    replay: VecDeque<StepRecord>,
    /// Recovered, and its first step after the restart not yet taken.
    recovering: bool,
    /// The status and receive of its last step, when it comes from a snapshot.
    last: Option<(Status, u32)>,
    /// The last value its monotonic clock gave it.
    monotonic: Option<u64>,
    /// Events since its last snapshot (a step with none counts as one).
    since_snapshot: u64,
    /// Recovered: its `init`, run once the recovery's gate opens.
    deferred: Option<(InitContext, String, Payload)>,
    /// Events its first step after recovery took without an instance to give them to: they go
    /// to its next step.
    stash: Vec<Event>,
    /// Yields not yet answered, by tag.
    pending: BTreeMap<Tag, Pending>,
    /// The events of the step being journaled.
    events: Vec<Event>,
    /// Yields re-armed at recovery, at the front of this step's output (not the guest's).
    rearmed: usize,
    /// The step answered from the journal alone (recovery, no new events): nothing to journal.
    synthetic: bool,
    /// Its end is journaled already.
    ended: bool,
    /// The pid a parent's step journaled it under, until it starts: dropped unstarted (the
    /// scheduler refused it), it journals that it never ran.
    reserved: Option<Pid>,
    /// Its entry point was started already ([`start_now`](Self::start_now)): `init` has nothing
    /// left to run.
    started: bool,
}

impl DurableProcess {
    pub(crate) fn new(
        mut inner: WasmProcess,
        durable: Arc<Durable>,
        id: Arc<str>,
        module: Arc<str>,
    ) -> DurableProcess {
        inner.set_workflow(Arc::clone(&id));
        DurableProcess {
            inner,
            durable,
            id,
            module,
            pid: Pid::HOST,
            seq: 0,
            saved: None,
            replay: VecDeque::new(),
            recovering: false,
            last: None,
            monotonic: None,
            since_snapshot: 0,
            deferred: None,
            stash: Vec::new(),
            pending: BTreeMap::new(),
            events: Vec::new(),
            rearmed: 0,
            synthetic: false,
            ended: false,
            reserved: None,
            started: false,
        }
    }

    /// Starts its entry point now, on the caller's thread, before it is spawned (whose `init`
    /// then only takes its place): a start whose input the guest refuses fails here, before
    /// anything is journaled. What it reads from WASI is recorded for its first step, as in
    /// `init`.
    pub(crate) fn start_now(
        &mut self,
        ctx: &InitContext,
        method: &str,
        input: Payload,
    ) -> Result<(), ProcessError> {
        self.inner.set_reads(self.first_reads());
        self.inner.init(ctx, method, input)?;
        self.started = true;
        Ok(())
    }

    /// A workflow recovered after a restart: from `saved` if it has a snapshot, then the
    /// journaled steps `replay` (those after the snapshot, or all of them).
    pub(crate) fn recovered(
        mut self,
        saved: Option<SavedWorkflow>,
        replay: Vec<StepRecord>,
    ) -> DurableProcess {
        self.saved = saved;
        self.replay = replay.into();
        self.recovering = true;
        self
    }

    /// A workflow whose journal `replay` is checked against its module (nothing runs).
    pub(crate) fn checking(mut self, replay: Vec<StepRecord>) -> DurableProcess {
        self.replay = replay.into();
        self
    }

    /// A child journaled under `pid` by its parent's step.
    pub(crate) fn reserved(mut self, pid: Pid) -> DurableProcess {
        self.reserved = Some(pid);
        self
    }

    /// The yields as the guest made them: a spawn of "this module" names none (the host filled
    /// in the name its module is loaded under, which differs after a restart).
    fn normalize(&self, yields: &mut [Yield]) {
        let own = self.inner.module_name();
        for y in yields {
            if let Command::Spawn(spawn) = &mut y.command {
                if spawn.module.as_deref() == Some(own) {
                    spawn.module = None;
                }
            }
        }
    }

    /// Updates what is pending with one step: answered yields go, new ones come.
    fn track(&mut self, events: &[Event], record: &StepRecord) {
        for event in events {
            if event.kind == EventKind::YieldComplete {
                self.pending.remove(&event.tag);
            }
        }
        let find =
            |list: &[(Tag, u64)], tag: Tag| list.iter().find(|(t, _)| *t == tag).map(|p| p.1);
        for y in &record.output.yields {
            match &y.command {
                Command::Forget(tag) => {
                    self.pending.remove(tag);
                }
                command if command.kind().expects_completion() => {
                    let spawned = record
                        .spawned
                        .iter()
                        .find(|(t, _)| *t == y.tag)
                        .map(|p| p.1);
                    self.pending.insert(
                        y.tag,
                        Pending {
                            command: command.clone(),
                            due: find(&record.dues, y.tag),
                            sent: find(&record.sent, y.tag),
                            spawned,
                        },
                    );
                }
                _ => {}
            }
        }
    }

    /// Its state after step `seq` (answered `out`), when the host's snapshot policy says one is
    /// due and its module can hibernate.
    fn snapshot_if_due(&mut self, seq: u64, out: &StepOutput) -> Option<NewSnapshot> {
        let policy = self.durable.snapshots;
        if !policy.due(self.since_snapshot, self.inner.is_hibernated()) {
            return None;
        }
        let process = self.inner.save()?;
        let pending = self.pending.iter().map(|(t, p)| (*t, p.clone())).collect();
        let saved = SavedWorkflow::new(
            seq,
            out.status.clone(),
            out.receive,
            pending,
            self.monotonic,
            process,
        );
        self.since_snapshot = 0;
        Counts::add(&self.durable.counts.snapshots_written, 1);
        Some(NewSnapshot {
            num: self.pid.0,
            seq,
            module: self.module.to_string(),
            state: saved.encode(),
        })
    }
}

impl Process for DurableProcess {
    fn init(
        &mut self,
        ctx: &InitContext,
        method: &str,
        input: Payload,
    ) -> Result<(), ProcessError> {
        self.pid = ctx.pid();
        self.reserved = None;
        self.durable.ids.insert(self.pid, Arc::clone(&self.id));
        if self.recovering {
            // Started past the recovery's gate: a process waiting there holds no instance.
            self.deferred = Some((ctx.clone(), method.to_string(), input));
            return Ok(());
        }
        if std::mem::take(&mut self.started) {
            return Ok(());
        }
        self.inner.set_reads(self.first_reads());
        self.inner.init(ctx, method, input)
    }

    fn prepare(&mut self, waker: &WakerSource<'_>) -> Result<Readiness, ProcessError> {
        if self.recovering && self.durable.held_at_gate(|| waker.waker()) {
            return Ok(Readiness::NotReady);
        }
        if let Some((ctx, method, input)) = self.deferred.take() {
            match self.saved.take() {
                Some(saved) => self.init_saved(&ctx, &method, input, saved)?,
                None => {
                    self.inner.set_reads(self.first_reads());
                    // Its `init` ran before the restart if a step was journaled after it:
                    // what it logs was logged then (the replay, in its first step, unmutes).
                    self.inner.mute(!self.replay.is_empty());
                    self.inner.init(&ctx, &method, input)?;
                }
            }
        }
        if self.recovering && self.replay.is_empty() && self.inner.is_hibernated() {
            // Restored from its snapshot with nothing to replay: its first step is answered
            // from the snapshot, and it takes an instance only for an event.
            return Ok(Readiness::Ready);
        }
        self.inner.prepare(waker)
    }

    fn check(&self, command: &Command) -> Result<(), CommandError> {
        self.inner.check(command)
    }

    fn step(&mut self, events: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
        let mut rearmed = Vec::new();
        if std::mem::take(&mut self.recovering) {
            let last = match self.replay_all()? {
                Some(output) => Some((output.status, output.receive)),
                None => self.last.take(),
            };
            self.rearm(&mut rearmed);
            if let Some((status, receive)) = last {
                let new = events.len() > 0;
                if !new {
                    // The replay's instance goes back if the host is short of them.
                    self.inner.hibernate_if_waiting(&status);
                }
                if !new || !self.inner.wake_now()? {
                    // Nothing new, or no instance for it now: the process stands where its
                    // snapshot and journal left it; its events wait for its next step, which
                    // queues for an instance.
                    self.stash.extend(events.as_slice().iter().cloned());
                    out.status = if new { Status::Continue } else { status };
                    out.receive = receive;
                    out.yields = rearmed;
                    self.synthetic = true;
                    return Ok(());
                }
            }
        }
        self.events.clear();
        let mut stashed = std::mem::take(&mut self.stash);
        if stashed.is_empty() {
            self.events.extend(events.as_slice().iter().cloned());
            self.inner.step(events, out)?;
        } else {
            stashed.extend(events.as_slice().iter().cloned());
            self.events.extend(stashed.iter().cloned());
            self.inner.step(Events::new(&mut stashed), out)?;
        }
        self.rearmed = rearmed.len();
        if !rearmed.is_empty() {
            out.yields.splice(0..0, rearmed);
        }
        Ok(())
    }

    fn journal(&mut self, out: &StepOutput, hold: &Hold<'_>) {
        if std::mem::take(&mut self.synthetic) {
            return;
        }
        let rearmed = std::mem::take(&mut self.rearmed);
        let seq = self.seq + 1;
        let now = unix_nanos();
        let at = now / 1_000_000;
        let reads = match self.inner.set_reads(Reads::Record(Vec::new())) {
            Reads::Record(reads) => reads,
            _ => Vec::new(),
        };
        let mut record = StepRecord {
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
        let mut ops = Vec::new();
        // The leading yields that are messages to journaled workflows go before this step is on
        // disk (see `journal`'s end).
        let mut early = 0;
        let own = self.inner.module_name().to_string();
        for (index, y) in record.output.yields.iter().enumerate() {
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
                    let number = self.durable.next_message();
                    ops.push(Op::Message(NewMessage {
                        id: number,
                        receiver: send.to.0,
                        sender: self.pid.0,
                        payload: postcard::to_allocvec(&send.message).unwrap_or_default(),
                        local: self.durable.ids.contains(send.to),
                    }));
                    record.sent.push((y.tag, number));
                    self.durable.sent.lock().insert((self.pid, y.tag), number);
                    if rearmed == 0 && index == early {
                        early += 1;
                    }
                }
                Command::Spawn(spawn) => {
                    let Some(scheduler) = self.durable.scheduler() else {
                        continue;
                    };
                    let child = scheduler.reserve_pid();
                    let id: Arc<str> = format!("{}/{seq}.{index}", self.id).into();
                    let (module, module_name) = match &spawn.module {
                        Some(name) if *name != own => match self.durable.module_hash(name) {
                            Some(hash) => (hash, name.clone()),
                            // Not loaded: the spawn fails at dispatch, and no child is started.
                            None => continue,
                        },
                        _ => (self.module.to_string(), own.clone()),
                    };
                    ops.push(Op::Start(NewWorkflow {
                        num: child.0,
                        id: id.to_string(),
                        parent: Some(self.pid.0),
                        module,
                        module_name,
                        entry: spawn.entry.clone(),
                        input: postcard::to_allocvec(&spawn.input).unwrap_or_default(),
                        started: at,
                    }));
                    record.spawned.push((y.tag, child));
                    self.durable
                        .spawned
                        .lock()
                        .insert((self.pid, y.tag), ChildStart { pid: child, id });
                }
                Command::Cancel(target) if self.durable.ids.contains(*target) => {
                    ops.push(Op::Cancel { num: target.0 });
                }
                _ => {}
            }
        }
        self.normalize(&mut record.output.yields);
        let consumed = record
            .events
            .iter()
            .filter(|e| e.kind == EventKind::Message && e.tag.0 != 0)
            .map(|e| e.tag.0)
            .collect();
        let took_cancel = record.events.iter().any(|e| e.kind == EventKind::Cancel);
        let events = std::mem::take(&mut record.events);
        self.track(&events, &record);
        record.events = events;
        let ending = match &out.status {
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
        };
        ops.push(Op::Step(NewStep {
            num: self.pid.0,
            seq,
            at,
            record: postcard::to_allocvec(&record).unwrap_or_default(),
            consumed,
            took_cancel,
        }));
        self.since_snapshot += record.weight();
        match ending {
            Some(ending) => {
                self.ended = true;
                ops.push(Op::End {
                    num: self.pid.0,
                    ending,
                    at,
                });
            }
            None => {
                if let Some(snapshot) = self.snapshot_if_due(seq, out) {
                    ops.push(Op::Snapshot(snapshot));
                }
            }
        }
        self.seq = seq;
        let release = hold.hold();
        if let Err(error) = self.durable.writer.submit(Entry {
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

    fn end(&mut self, result: &ProcessResult) {
        if self.ended || self.durable.is_stopping() {
            return;
        }
        self.ended = true;
        let ending = match result {
            Ok(payload) => Ending::Done(postcard::to_allocvec(payload).unwrap_or_default()),
            Err(error) => Ending::Failed {
                kind: error.kind().name().into(),
                message: error.message().into(),
            },
        };
        // Waited for: whoever hears of the end hears of it once it is on disk, and with it the
        // steps (possibly of other workflows, whose messages it took before their commit) that
        // led to it. Meanwhile it takes no more journaled messages (one would be written after
        // its end, for a receiver that never takes it).
        self.durable.ids.remove(self.pid);
        let ops = vec![Op::End {
            num: self.pid.0,
            ending,
            at: unix_millis(),
        }];
        if let Err(error) = self.durable.writer.write(ops) {
            tracing::error!(pid = %self.pid, workflow = %self.id, "the end of a workflow could not be journaled: {error}");
        }
    }

    fn close(&mut self) {
        self.durable.ids.remove(self.pid);
        self.inner.close();
    }
}

impl Drop for DurableProcess {
    fn drop(&mut self) {
        let Some(child) = self.reserved.take() else {
            return;
        };
        self.durable.ids.remove(child);
        if self.durable.is_stopping() {
            return;
        }
        let entry = Entry {
            ops: vec![Op::End {
                num: child.0,
                ending: Ending::Failed {
                    kind: "refused".into(),
                    message: format!("the host refused to start workflow '{}'", self.id),
                },
                at: unix_millis(),
            }],
            done: Done::Nothing,
        };
        if let Err(error) = self.durable.writer.submit(entry) {
            tracing::error!("a refused child could not be journaled: {error}");
        }
    }
}
