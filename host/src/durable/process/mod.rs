//! A durable workflow: a wasm process whose every step is journaled before its effects happen,
//! and which, after a restart, starts from its snapshot, replays the journal after it and re-arms
//! what it was waiting for (`replay.rs`).

mod dormant;
mod journal;
mod replay;
mod switch;

pub(crate) use dormant::{track, Standing};

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use wfcontract::{Command, CommandError, Event, Payload, Pid, Status, StepOutput, Tag, Yield};
use wfhost_scheduler::{
    Events, FailureKind, Hold, InitContext, Process, ProcessError, ProcessResult, Readiness,
    WakerSource,
};

pub(crate) use super::pending::Pending;
use super::record::StepRecord;
use super::snapshot::{Counts, SavedWorkflow};
use super::store::{Ending, NewSnapshot, Op};
use super::writer::{Done, Submission};
use super::{now_millis, Durable};
use crate::wasm::WasmProcess;

/// The calls of functions its host does not serve that one workflow may wait for at once.
const MAX_UNSERVED: usize = 100;

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
    saved: Option<Box<SavedWorkflow>>,
    /// The journal to replay before its first live step (recovery), oldest first: after its
    /// snapshot, or all of it.
    replay: VecDeque<StepRecord>,
    /// Recovered, and its first step after the restart not yet taken.
    recovering: bool,
    /// Recovered dormant (`dormant.rs`): no instance, its snapshot and journal in the store,
    /// until its first event restores it.
    dormant: bool,
    /// Restored from dormant this turn: its journal after its snapshot is replayed before the
    /// step.
    restoring: bool,
    /// Restored without a snapshot: it saves one at its next chance (its next hibernation), so
    /// that the next recovery need not replay it all again.
    snapshot_soon: bool,
    /// The status and receive of its last step, when it comes from a snapshot.
    last: Option<(Status, u32)>,
    /// The last value its monotonic clock gave it.
    monotonic: Option<u64>,
    /// Events since its last snapshot (a step with none counts as one).
    since_snapshot: u64,
    /// Recovered: its `init`, run once the recovery's gate opens.
    deferred: Option<Box<(InitContext, String, Payload)>>,
    /// Events its first step after recovery took without an instance to give them to: they go
    /// to its next step.
    stash: Vec<Event>,
    /// Yields not yet answered, by tag.
    pending: BTreeMap<Tag, Pending>,
    /// Dormant: the yields it waits for, until its first step re-arms them (`pending` is
    /// rebuilt when it is restored).
    standing: Vec<(Tag, Pending)>,
    /// The events of the step being journaled.
    events: Vec<Event>,
    /// Yields re-armed at recovery, at the front of this step's output (not the guest's).
    rearmed: usize,
    /// Of those, the sends to the host, by position: what they sent before the restart may
    /// stand.
    again: Vec<usize>,
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
    /// Its steps handed to the writer without being held, not yet on disk (`journal.rs`):
    /// made at its first such step.
    ahead: Option<Arc<std::sync::atomic::AtomicU32>>,
    /// In a traced host: its run's span (`trace.rs`), from its first live step here until it
    /// ends or leaves the host.
    run: Option<Box<crate::trace::RunSpan>>,
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
            dormant: false,
            restoring: false,
            snapshot_soon: false,
            last: None,
            monotonic: None,
            since_snapshot: 0,
            deferred: None,
            stash: Vec::new(),
            pending: BTreeMap::new(),
            standing: Vec::new(),
            events: Vec::new(),
            again: Vec::new(),
            rearmed: 0,
            synthetic: false,
            ended: false,
            reserved: None,
            started: false,
            ahead: None,
            run: None,
        }
    }

    /// In a traced host, its run's span is a child of `parent` (a `traceparent`), started at
    /// `started` (milliseconds since the epoch) unless it is `resumed` (taken up after a
    /// restart, or from another host), when it takes its first live step here.
    pub(crate) fn traced(
        mut self,
        parent: Option<&str>,
        entry: &str,
        started: (Option<u64>, bool),
    ) -> DurableProcess {
        if self.durable.traces().is_some() {
            self.run = Some(Box::new(crate::trace::RunSpan::new(parent, entry, started)));
        }
        self
    }

    /// The `traceparent` of its run's span, once it has one: its children's runs are the
    /// span's children.
    pub(crate) fn run_traceparent(&self) -> Option<String> {
        self.run.as_ref().and_then(|run| run.traceparent())
    }

    /// Starts its run's span if a call it waits for is made again now (re-armed after a
    /// restart, before any live step): the call's span is the run's child.
    fn trace_rearmed(&mut self, rearmed: &[Yield]) {
        if let (Some(run), Some(traces)) = (self.run.as_mut(), self.durable.traces()) {
            if rearmed.iter().any(|y| y.command.call().is_some()) {
                run.live(traces, self.pid);
            }
        }
    }

    /// Ends its run's span, if it has one: ended with `error`, or ok (`Some(None)`), or
    /// (`None`) left for another run of it (the host stops, or lets it go).
    fn end_run(&mut self, outcome: Option<Option<&str>>) {
        if let (Some(run), Some(traces)) = (self.run.as_mut(), self.durable.traces()) {
            run.end(traces, (self.pid, &self.id, &self.module), outcome);
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

    /// Whether its module may reach any process, not only its own children.
    pub(crate) fn reaches_any_process(&self) -> bool {
        self.inner.reaches_any_process()
    }

    /// A workflow recovered after a restart: from `saved` if it has a snapshot, then the
    /// journaled steps `replay` (those after the snapshot, or all of them).
    pub(crate) fn recovered(
        mut self,
        saved: Option<SavedWorkflow>,
        replay: Vec<StepRecord>,
    ) -> DurableProcess {
        self.saved = saved.map(Box::new);
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

    /// The yields as the journal keeps them: a spawn of "this module" names none, whether the
    /// guest named none or named the name its module is loaded under here (which differs after
    /// a restart, and which journals written before spawns found their module by handle hold
    /// as none).
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
        dormant::track(&mut self.pending, events, record);
    }

    /// Answers a step from the journal alone: where the workflow stands (`last`: the status
    /// and receive of its last journaled step) and the `rearmed` yields. Its `events` wait for
    /// its next step, which it asks for at once (`Continue`) if there are any.
    fn answer_from_journal(
        &mut self,
        events: Events<'_>,
        out: &mut StepOutput,
        last: (Status, u32),
        rearmed: Vec<Yield>,
    ) {
        let new = events.len() > 0;
        self.stash.extend(events.as_slice().iter().cloned());
        out.status = if new { Status::Continue } else { last.0 };
        out.receive = last.1;
        out.yields = rearmed;
        self.synthetic = true;
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
        if self.recovering {
            // Recovery noted its id when it spawned it. Its `init` runs past the recovery's
            // gate (a process waiting there holds no instance).
            self.deferred = Some(Box::new((ctx.clone(), method.to_string(), input)));
            return Ok(());
        }
        self.durable.ids.insert(self.pid, Arc::clone(&self.id));
        if std::mem::take(&mut self.started) {
            return Ok(());
        }
        self.inner.set_reads(self.first_reads());
        self.inner.init(ctx, method, input)
    }

    fn prepare(&mut self, waker: &WakerSource<'_>) -> Result<Readiness, ProcessError> {
        if let Some(upgrade) = self.durable.upgrades.take(self.pid.0) {
            // Between two steps, paused or not: the new module takes over from here.
            self.switch(upgrade);
        }
        if !waker.terminating() && self.durable.held_paused(self.pid.0, || waker.waker()) {
            // Paused: it takes no step, its events queued, until it is unpaused and woken.
            return Ok(Readiness::NotReady);
        }
        if self.recovering && self.durable.held_at_gate(|| waker.waker()) {
            return Ok(Readiness::NotReady);
        }
        if self.dormant {
            // Its first step is answered from where the journal left it; a termination ends
            // it as it is, with nothing read back.
            if self.recovering || waker.terminating() {
                return Ok(Readiness::Ready);
            }
            self.restore()?;
        }
        if self.deferred.is_some() {
            if self.saved.is_none()
                && matches!(self.inner.reserve_instance(waker)?, Readiness::NotReady)
            {
                // Its `init` needs an instance: it waits for one, as a hibernated process does.
                return Ok(Readiness::NotReady);
            }
            if let Some(deferred) = self.deferred.take() {
                let (ctx, method, input) = *deferred;
                match self.saved.take() {
                    Some(saved) => self.init_saved(&ctx, &method, input, *saved)?,
                    None => {
                        self.inner.set_reads(self.first_reads());
                        // Its `init` ran before the restart if a step was journaled after it:
                        // what it logs was logged then (the replay, in its first step,
                        // unmutes).
                        self.inner.mute(!self.replay.is_empty());
                        self.inner.init(&ctx, &method, input)?;
                    }
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
        match (self.inner.check(command), command.call()) {
            // A function this host does not serve is no refusal of the module's grants: the
            // call waits for a host that serves it, whose grants then decide. Within the
            // payload limit, and so many at a time.
            (Err(refused), Some(call))
                if refused.kind == wfcontract::ErrorKind::NotAllowed
                    && !self.durable.serves(&call.name) =>
            {
                self.inner.check_size(command)?;
                let waiting = self
                    .pending
                    .values()
                    .filter(|p| {
                        p.command
                            .call()
                            .is_some_and(|c| !self.durable.serves(&c.name))
                    })
                    .count();
                if waiting >= MAX_UNSERVED {
                    return Err(CommandError::new(
                        wfcontract::ErrorKind::LimitReached,
                        format!(
                            "this workflow waits for {waiting} calls of functions this host does \
                             not serve, the most a workflow may: '{}' is not called",
                            call.name
                        ),
                    ));
                }
                Ok(())
            }
            (checked, _) => checked,
        }
    }

    fn lineage(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        self.inner.lineage()
    }

    fn step(&mut self, events: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
        let mut rearmed = Vec::new();
        if self.recovering && self.dormant {
            self.recovering = false;
            let standing = std::mem::take(&mut self.standing);
            self.rearm_these(standing, &mut rearmed);
            self.trace_rearmed(&rearmed);
            let (status, receive) = self.last.clone().unwrap_or((Status::Continue, 0));
            // Its events wait for its next step, which restores it.
            self.answer_from_journal(events, out, (status, receive), rearmed);
            return Ok(());
        } else if std::mem::take(&mut self.restoring) {
            self.replay_all()?;
            if std::mem::take(&mut self.snapshot_soon) {
                let soon = self.durable.snapshots.at_next_hibernation();
                self.since_snapshot = self.since_snapshot.max(soon);
            }
        } else if std::mem::take(&mut self.recovering) {
            let last = match self.replay_all()? {
                Some(output) => Some((output.status, output.receive)),
                None => self.last.take(),
            };
            self.rearm(&mut rearmed);
            self.trace_rearmed(&rearmed);
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
                    self.answer_from_journal(events, out, (status, receive), rearmed);
                    return Ok(());
                }
            }
        }
        self.events.clear();
        let mut stashed = std::mem::take(&mut self.stash);
        let span = match (self.run.as_mut(), self.durable.traces()) {
            (Some(run), Some(traces)) => {
                let run = run.live(traces, self.pid);
                Some(traces.step(run, self.seq + 1, stashed.len() + events.len()))
            }
            _ => None,
        };
        let stepped = if stashed.is_empty() {
            self.events.extend(events.as_slice().iter().cloned());
            self.inner.step(events, out)
        } else {
            stashed.extend(events.as_slice().iter().cloned());
            self.events.extend(stashed.iter().cloned());
            self.inner.step(Events::new(&mut stashed), out)
        };
        if let Some(span) = span {
            crate::trace::end_step(span, out, stepped.as_ref().err());
        }
        stepped?;
        self.rearmed = rearmed.len();
        if !rearmed.is_empty() {
            out.yields.splice(0..0, rearmed);
        }
        Ok(())
    }

    fn journal(&mut self, out: &StepOutput, hold: &Hold<'_>) {
        self.journal_step(out, hold);
    }

    fn end(&mut self, result: &ProcessResult) {
        if !self.durable.is_stopping() {
            // Whether its last step journaled its end already (`ended`) or not.
            let failure = result
                .as_ref()
                .err()
                .map(|error| error.message().to_string());
            self.end_run(Some(failure.as_deref()));
        }
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
        self.durable.forget_paused(self.pid.0);
        let ops = vec![Op::End {
            num: self.pid.0,
            ending,
            at: now_millis(),
        }];
        if let Err(error) = self.durable.writer.write(ops) {
            tracing::error!(pid = %self.pid, workflow = %self.id, "the end of a workflow could not be journaled: {error}");
        }
    }

    fn close(&mut self) {
        self.end_run(None);
        self.durable.ids.remove(self.pid);
        self.inner.close();
    }
}

impl Drop for DurableProcess {
    fn drop(&mut self) {
        // Neither ended nor closed (the scheduler does one or the other to what it ran).
        self.end_run(None);
        let Some(child) = self.reserved.take() else {
            return;
        };
        self.durable.ids.remove(child);
        if self.durable.is_stopping() {
            return;
        }
        let entry = Submission {
            ops: vec![Op::End {
                num: child.0,
                ending: Ending::Failed {
                    kind: FailureKind::Refused.name().into(),
                    message: format!("the host refused to start workflow '{}'", self.id),
                },
                at: now_millis(),
            }],
            done: Done::Nothing,
        };
        if let Err(error) = self.durable.writer.submit(entry) {
            tracing::error!("a refused child could not be journaled: {error}");
        }
    }
}
