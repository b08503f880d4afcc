//! Recovery of one durable workflow: its snapshot restored, the journal after it replayed (each
//! step's answer checked against the journal), then what it waited for re-armed.

use std::collections::VecDeque;
use std::sync::Arc;

use wfcontract::{Command, CommandError, ErrorKind, Payload, StepOutput, Tag, Yield};
use wfhost_scheduler::{Events, FailureKind, InitContext, Process, ProcessError};

use super::{DurableProcess, Pending};
use crate::durable::record::StepRecord;
use crate::durable::snapshot::{Counts, SavedWorkflow};
use crate::wasm::reads::{Read, Reads};

impl DurableProcess {
    pub(super) fn nondeterminism(&self, seq: u64, what: impl std::fmt::Display) -> ProcessError {
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

    /// Starts the process from its snapshot, hibernated, in place of `init`. A snapshot that does
    /// not fit its module is set aside: the whole journal is read again and replayed instead.
    pub(super) fn init_saved(
        &mut self,
        ctx: &InitContext,
        method: &str,
        input: Payload,
        saved: SavedWorkflow,
    ) -> Result<(), ProcessError> {
        let SavedWorkflow {
            seq,
            status,
            receive,
            pending,
            monotonic,
            process,
            ..
        } = saved;
        if let Err(error) = self.inner.init_saved(ctx, method, process) {
            tracing::warn!(
                workflow = %self.id,
                "its snapshot at step {seq} is not used ({}); replaying its whole journal",
                error.message()
            );
            Counts::add(&self.durable.counts.snapshots_ignored, 1);
            self.replay = self.whole_journal()?;
            // So that the next recovery need not do this again.
            self.snapshot_soon = true;
            self.inner.set_reads(self.first_reads());
            self.inner.mute(!self.replay.is_empty());
            return self.inner.init(ctx, method, input);
        }
        Counts::add(&self.durable.counts.snapshots_restored, 1);
        self.seq = seq;
        self.pending = pending.into_iter().collect();
        self.last = Some((status, receive));
        self.monotonic = monotonic;
        if let Some(nanos) = monotonic {
            self.inner.set_monotonic(nanos);
        }
        self.inner.set_reads(Reads::Record(Vec::new()));
        Ok(())
    }

    /// The workflow's whole journal, read from the store.
    fn whole_journal(&self) -> Result<VecDeque<StepRecord>, ProcessError> {
        let fail = |what: String| {
            ProcessError::new(format!(
                "workflow '{}' could not be recovered: {what}",
                self.id
            ))
        };
        let steps = self
            .durable
            .reader
            .lock()
            .steps(self.pid.0, 0)
            .map_err(|e| fail(e.to_string()))?;
        steps
            .iter()
            .map(|s| StepRecord::decode(&s.record))
            .collect::<Result<_, _>>()
            .map_err(|e| fail(format!("its journal does not decode: {e}")))
    }

    /// Replays the journal queued for replay into the instance, checking each step's answer.
    /// Returns the last step's answer.
    pub(super) fn replay_all(&mut self) -> Result<Option<StepOutput>, ProcessError> {
        // The first step's reads (its `init`'s among them) were set before `init`.
        let mut first = self.seq == 0;
        let durable = Arc::clone(&self.durable);
        let counts = &durable.counts;
        // One replayed step follows another at once: no hibernating in between.
        self.inner.pin(true);
        // What it logs was logged before the restart (its `init`'s too, muted where it ran).
        self.inner.mute(true);
        let replayed = self.replay_queued(&mut first, counts);
        self.inner.mute(false);
        self.inner.pin(false);
        replayed
    }

    fn replay_queued(
        &mut self,
        first: &mut bool,
        counts: &Counts,
    ) -> Result<Option<StepOutput>, ProcessError> {
        let mut last = None;
        while let Some(record) = self.replay.pop_front() {
            let seq = self.seq + 1;
            if !*first {
                self.inner.set_reads(Reads::Replay {
                    reads: record.reads.iter().cloned().collect(),
                    diverged: None,
                });
            }
            *first = false;
            self.note_reads(&record.reads);
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
                let unread = crate::wasm::reads::unread(reads);
                if unread > 0 {
                    return Err(self.nondeterminism(
                        seq,
                        format_args!(
                            "it made {unread} fewer WASI reads (clock, randomness) than the journal \
                             has"
                        ),
                    ));
                }
            }
            self.normalize(&mut out.yields);
            if !same_effects(&record.output, &out) {
                return Err(self.nondeterminism(seq, differences(&record.output, &out)));
            }
            Counts::add(&counts.steps_replayed, 1);
            Counts::add(&counts.events_replayed, record.events.len() as u64);
            self.since_snapshot += record.weight();
            self.seq = seq;
            self.track(&record.events, &record);
            last = Some(record.output);
        }
        if let Some(nanos) = self.monotonic {
            self.inner.set_monotonic(nanos);
        }
        self.inner.set_reads(Reads::Record(Vec::new()));
        Ok(last)
    }

    /// Remembers the last value the monotonic clock gave among `reads`.
    pub(super) fn note_reads(&mut self, reads: &[Read]) {
        for read in reads {
            if let Read::Clock { id: 1, nanos } = read {
                self.monotonic = Some(*nanos);
            }
        }
    }

    /// How the reads of `init` and the first step are served: from the journal's first step when
    /// there is one to replay, else recorded.
    pub(super) fn first_reads(&self) -> Reads {
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
            // Short of an instance or of memory now: nothing says the module differs.
            Err(error) if error.kind() == FailureKind::Limit => Err(error),
            Err(error) => Err(self.nondeterminism(0, format_args!("it does not start: {error}"))),
        };
        self.inner.close();
        result
    }

    /// After a replay: what was pending goes on. Yields whose effect is known (a message
    /// already sent, a child already started, a join of a workflow that ended) complete at once;
    /// the rest are dispatched again (timers at their due time, host calls with the same key).
    pub(super) fn rearm(&mut self, out: &mut Vec<Yield>) {
        let pending: Vec<(Tag, Pending)> =
            self.pending.iter().map(|(t, p)| (*t, p.clone())).collect();
        self.rearm_these(pending, out);
    }

    /// As [`rearm`](Self::rearm), for the yields `pending`.
    pub(super) fn rearm_these(&mut self, pending: Vec<(Tag, Pending)>, out: &mut Vec<Yield>) {
        let Some(scheduler) = self.durable.scheduler() else {
            return;
        };
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
                (command, _, _) => {
                    if let Command::Send(send) = command {
                        if send.to == wfcontract::Pid::HOST {
                            // Kept before the restart, or not: the store says which.
                            self.again.push(out.len());
                        }
                    }
                    out.push(Yield {
                        tag,
                        command: command.clone(),
                    })
                }
            }
        }
    }
}

/// Whether a replayed answer does what the journaled one did: the same status, the same count of
/// messages asked for, and the same yields in the same order with the same arguments, log
/// records aside. Logs are not effects: a reworded, added or removed log line never strands a
/// running workflow (log records carry no tag, so the others' tags do not move).
fn same_effects(journaled: &StepOutput, replayed: &StepOutput) -> bool {
    let (a, b): (Vec<&Yield>, Vec<&Yield>) =
        (effects(journaled).collect(), effects(replayed).collect());
    journaled.status == replayed.status
        && journaled.receive == replayed.receive
        && a.len() == b.len()
        && a.iter().zip(&b).all(|(a, b)| same_yield(a, b))
}

/// Whether a replayed yield is the journaled one. A journal written by a module built before
/// ABI 3 holds a retried call's later attempts as `call`, where a rebuild yields `retry` with
/// the same call: the same effect (only the idempotency key it is given differs).
fn same_yield(journaled: &Yield, replayed: &Yield) -> bool {
    journaled.tag == replayed.tag
        && (journaled.command == replayed.command
            || matches!(
                (&journaled.command, &replayed.command),
                (Command::Call(call), Command::Retry(retry)) if *call == retry.call
            ))
}

/// The yields of `out` that are not log records.
fn effects(out: &StepOutput) -> impl Iterator<Item = &Yield> {
    out.yields
        .iter()
        .filter(|y| !matches!(y.command, Command::Log(_)))
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
    let a: Vec<&Yield> = effects(journaled).collect();
    let b: Vec<&Yield> = effects(replayed).collect();
    let differs = |i: usize| match (a.get(i), b.get(i)) {
        (Some(x), Some(y)) => !same_yield(x, y),
        _ => true,
    };
    if let Some(i) = (0..a.len().max(b.len())).find(|&i| differs(i)) {
        let show = |y: Option<&&Yield>| match y {
            Some(y) => format!("{} (tag {})", describe(&y.command), y.tag.0),
            None => "nothing".to_string(),
        };
        what.push(format!(
            "its command #{} (log records aside) was {} and is now {}",
            i + 1,
            show(a.get(i)),
            show(b.get(i))
        ));
    }
    what.join("; ")
}

/// A command in a few words, its payloads by size (they may be large, or secret).
fn describe(command: &Command) -> String {
    match command {
        Command::Sleep(duration) => format!("sleep {duration:?}"),
        Command::SleepUntil(nanos) => format!("sleep until {nanos} ns after the Unix epoch"),
        Command::Log(record) => format!("log at {:?}", record.level),
        Command::Send(send) => format!("send to {} ({} bytes)", send.to, send.message.bytes.len()),
        Command::Spawn(spawn) => format!(
            "spawn '{}'{} ({} bytes of input)",
            spawn.entry,
            spawn
                .module
                .as_deref()
                .map_or_else(String::new, |m| format!(" of module '{m}'")),
            spawn.input.bytes.len()
        ),
        Command::Join(pid) => format!("join {pid}"),
        Command::Cancel(pid) => format!("cancel {pid}"),
        Command::Call(call) => format!(
            "call '{}' ({} bytes of input)",
            call.name,
            call.input.bytes.len()
        ),
        Command::Now => "now".into(),
        Command::Random => "random".into(),
        Command::Forget(tag) => format!("forget {tag}"),
        Command::Retry(retry) => format!(
            "attempt {} of call '{}' ({} bytes of input)",
            retry.attempt,
            retry.call.name,
            retry.call.input.bytes.len()
        ),
    }
}

#[cfg(test)]
mod tests {
    use wfcontract::{CallRequest, Payload, RetryRequest, Tag};

    use super::*;

    fn call(name: &str) -> CallRequest {
        CallRequest {
            name: name.into(),
            input: Payload::json_bytes(b"1".to_vec()),
        }
    }

    #[test]
    fn a_journaled_call_is_the_retry_a_rebuild_makes_of_it() {
        let journaled = Yield {
            tag: Tag(4),
            command: Command::Call(call("payments.charge")),
        };
        let retry = |name: &str, tag: u64| Yield {
            tag: Tag(tag),
            command: Command::Retry(RetryRequest {
                first: Tag(1),
                attempt: 2,
                call: call(name),
            }),
        };
        assert!(same_yield(&journaled, &retry("payments.charge", 4)));
        // Another call, or another tag, is another effect.
        assert!(!same_yield(&journaled, &retry("payments.refund", 4)));
        assert!(!same_yield(&journaled, &retry("payments.charge", 5)));
        // Not the other way round: a retry journaled is replayed as a retry.
        assert!(!same_yield(&retry("payments.charge", 4), &journaled));
    }
}
