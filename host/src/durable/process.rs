//! A durable workflow: a wasm process whose every step is journaled before its effects happen,
//! and which, after a restart, replays its journal and re-arms what it was waiting for.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use wfcontract::{
    Command, CommandError, ErrorKind, Event, EventKind, Payload, Pid, Status, StepOutput, Tag,
    Yield,
};
use wfhost_scheduler::{
    Events, FailureKind, Hold, InitContext, Process, ProcessError, ProcessResult, Readiness,
    WakerSource,
};

use super::record::StepRecord;
use super::store::{Ending, NewMessage, NewStep, NewWorkflow, Op};
use super::writer::{Done, Entry};
use super::{ChildStart, Durable};
use crate::wasm::reads::{Read, Reads};
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
#[derive(Clone, Debug)]
struct Pending {
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
    /// The journal to replay before its first live step (recovery), oldest first.
    replay: VecDeque<StepRecord>,
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
}

impl DurableProcess {
    pub(crate) fn new(
        inner: WasmProcess,
        durable: Arc<Durable>,
        id: Arc<str>,
        module: Arc<str>,
        replay: Vec<StepRecord>,
    ) -> DurableProcess {
        DurableProcess {
            inner,
            durable,
            id,
            module,
            pid: Pid::HOST,
            seq: 0,
            replay: replay.into(),
            pending: BTreeMap::new(),
            events: Vec::new(),
            rearmed: 0,
            synthetic: false,
            ended: false,
            reserved: None,
        }
    }

    /// A child journaled under `pid` by its parent's step.
    pub(crate) fn reserved(mut self, pid: Pid) -> DurableProcess {
        self.reserved = Some(pid);
        self
    }

    fn nondeterminism(&self, seq: u64, what: impl std::fmt::Display) -> ProcessError {
        ProcessError::with_kind(
            FailureKind::Nondeterminism,
            format!(
                "workflow '{}' (process {}) diverged from its journal at step {seq}: {what}. The \
                 module behaves differently from the one that wrote the journal (a changed \
                 build, or code that reads time or randomness outside the SDK)",
                self.id, self.pid
            ),
        )
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

    /// Replays the whole journal into the fresh instance, checking each step's answer.
    fn replay_all(&mut self) -> Result<Option<StepOutput>, ProcessError> {
        let mut last = None;
        let mut monotonic = None;
        let mut first = true;
        while let Some(record) = self.replay.pop_front() {
            let seq = self.seq + 1;
            if !first {
                self.inner.set_reads(Reads::Replay {
                    reads: record.reads.iter().cloned().collect(),
                    diverged: None,
                });
            }
            first = false;
            for read in &record.reads {
                if let Read::Clock { id: 1, nanos } = read {
                    monotonic = Some(*nanos);
                }
            }
            let mut events = record.events.clone();
            let mut out = StepOutput::new();
            let stepped = self.inner.step(Events::new(&mut events), &mut out);
            let reads = self.inner.set_reads(Reads::Live);
            if let Reads::Replay {
                diverged: Some(what),
                ..
            } = &reads
            {
                return Err(self.nondeterminism(seq, what));
            }
            if let Err(error) = stepped {
                return Err(self.nondeterminism(
                    seq,
                    format_args!("the step failed on replay ({error}) where it had succeeded"),
                ));
            }
            if let Reads::Replay { reads, .. } = &reads {
                if !reads.is_empty() {
                    return Err(self.nondeterminism(
                        seq,
                        format_args!(
                            "it made {} fewer WASI reads (clock, randomness) than the journal has",
                            reads.len()
                        ),
                    ));
                }
            }
            self.normalize(&mut out.yields);
            if out != record.output {
                return Err(self.nondeterminism(seq, differences(&record.output, &out)));
            }
            self.seq = seq;
            self.track(&record.events, &record);
            last = Some(record.output);
        }
        if let Some(nanos) = monotonic {
            self.inner.set_monotonic(nanos);
        }
        self.inner.set_reads(Reads::Record(Vec::new()));
        Ok(last)
    }

    /// How the reads of `init` and the first step are served: from the journal's first step when
    /// there is one to replay, else recorded.
    fn first_reads(&self) -> Reads {
        match self.replay.front() {
            Some(first) => Reads::Replay {
                reads: first.reads.iter().cloned().collect(),
                diverged: None,
            },
            None => Reads::Record(Vec::new()),
        }
    }

    /// Replays the whole journal into a fresh instance and closes it, touching nothing else:
    /// whether this module does what the journal says. Returns the steps replayed.
    pub(crate) fn check_replay(
        mut self,
        ctx: &InitContext,
        entry: &str,
        input: Payload,
    ) -> Result<u64, ProcessError> {
        self.pid = ctx.pid();
        self.inner.set_reads(self.first_reads());
        let result = match self.inner.init(ctx, entry, input) {
            Ok(()) => self.replay_all().map(|_| self.seq),
            Err(error) => Err(self.nondeterminism(0, format_args!("it does not start: {error}"))),
        };
        self.inner.close();
        result
    }

    /// After a replay: what was pending goes on. Yields whose effect is known (a message
    /// already sent, a child already started, a join of a workflow that ended) complete at once;
    /// the rest are dispatched again (timers at their due time, host calls with the same key).
    fn rearm(&mut self, out: &mut Vec<Yield>) {
        let Some(scheduler) = self.durable.scheduler() else {
            return;
        };
        let pending: Vec<(Tag, Pending)> =
            self.pending.iter().map(|(t, p)| (*t, p.clone())).collect();
        for (tag, pending) in pending {
            let complete = |result: Result<Payload, CommandError>| {
                let _ = scheduler.complete_yield(self.pid, tag, result);
            };
            match (&pending.command, pending.sent, pending.spawned) {
                (Command::Send(_), Some(number), _) => match self.durable.refusal(number) {
                    Some(error) => complete(Err(error)),
                    None => complete(Ok(Payload::empty())),
                },
                (Command::Spawn(_), _, Some(child)) => match self.durable.refused_child(child) {
                    Some(error) => complete(Err(error)),
                    None => complete(
                        Payload::to_postcard(&child)
                            .map_err(|e| CommandError::new(ErrorKind::Failed, e.to_string())),
                    ),
                },
                (Command::Join(target), _, _) => match self.durable.ended(*target) {
                    Some(result) => complete(result),
                    None => out.push(Yield {
                        tag,
                        command: pending.command,
                    }),
                },
                (Command::Sleep(_), _, _) => out.push(Yield {
                    tag,
                    command: Command::SleepUntil(pending.due.unwrap_or(0)),
                }),
                (command, _, _) => out.push(Yield {
                    tag,
                    command: command.clone(),
                }),
            }
        }
    }
}

/// What differs between a journaled answer and a replayed one, for the error message.
fn differences(journaled: &StepOutput, replayed: &StepOutput) -> String {
    let mut what = Vec::new();
    if journaled.status != replayed.status {
        what.push(format!(
            "its status was {:?} and is now {:?}",
            journaled.status, replayed.status
        ));
    }
    if journaled.receive != replayed.receive {
        what.push(format!(
            "it asked for {} messages and now asks for {}",
            journaled.receive, replayed.receive
        ));
    }
    let (a, b) = (&journaled.yields, &replayed.yields);
    if let Some(i) = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i)) {
        let show = |y: Option<&Yield>| match y {
            Some(y) => format!("{:?} (tag {})", y.command, y.tag.0),
            None => "nothing".to_string(),
        };
        what.push(format!(
            "its yield #{} was {} and is now {}",
            i + 1,
            show(a.get(i)),
            show(b.get(i))
        ));
    }
    what.join("; ")
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
        self.inner.set_reads(self.first_reads());
        self.inner.init(ctx, method, input)
    }

    fn prepare(&mut self, waker: &WakerSource<'_>) -> Result<Readiness, ProcessError> {
        self.inner.prepare(waker)
    }

    fn check(&self, command: &Command) -> Result<(), CommandError> {
        self.inner.check(command)
    }

    fn step(&mut self, events: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
        let mut rearmed = Vec::new();
        if !self.replay.is_empty() {
            let last = self.replay_all()?;
            self.rearm(&mut rearmed);
            if events.len() == 0 {
                // Nothing new: the process stands where its journal left it.
                if let Some(last) = last {
                    out.status = last.status;
                    out.receive = last.receive;
                }
                out.yields = rearmed;
                self.synthetic = true;
                return Ok(());
            }
        }
        self.events.clear();
        self.events.extend(events.as_slice().iter().cloned());
        self.inner.step(events, out)?;
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
        let mut ops = Vec::new();
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
                Command::Send(send) if self.durable.ids.contains(send.to) => {
                    let number = self.durable.next_message();
                    ops.push(Op::Message(NewMessage {
                        id: number,
                        receiver: send.to.0,
                        sender: self.pid.0,
                        payload: postcard::to_allocvec(&send.message).unwrap_or_default(),
                    }));
                    record.sent.push((y.tag, number));
                    self.durable.sent.lock().insert((self.pid, y.tag), number);
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
        if let Some(ending) = ending {
            self.ended = true;
            ops.push(Op::End {
                num: self.pid.0,
                ending,
                at,
            });
        }
        self.seq = seq;
        let release = hold.hold();
        if let Err(error) = self.durable.writer.submit(Entry {
            ops,
            done: Done::Release(release),
        }) {
            // Never released: the step's effects must not happen unjournaled.
            tracing::error!(pid = %self.pid, "a step could not be journaled: {error}");
        }
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
        let entry = Entry {
            ops: vec![Op::End {
                num: self.pid.0,
                ending,
                at: unix_millis(),
            }],
            done: Done::Nothing,
        };
        if let Err(error) = self.durable.writer.submit(entry) {
            tracing::error!(pid = %self.pid, "the end of a workflow could not be journaled: {error}");
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
