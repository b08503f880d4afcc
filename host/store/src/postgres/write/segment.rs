//! A segment of a batch: consecutive ops that commute (modules, starts, messages, steps,
//! snapshots, ends), gathered by kind as the columns of their tables and written with one
//! statement per kind over arrays, the ends last.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use tokio_postgres::{Client, Statement};

use super::statements::Statements;
use super::Pipeline;
use crate::{Ending, NewMessage, NewSnapshot, NewStep, NewWorkflow, Op};

/// Rows of ops that commute, by kind, as the columns of their tables.
#[derive(Default)]
pub(super) struct Segment<'a> {
    pub(super) module_hash: Vec<Text<'a>>,
    pub(super) module_bytes: Vec<&'a [u8]>,
    pub(super) starts: Starts<'a>,
    /// Top-level starts that give way to a workflow of the same id (`Op::StartOnce`).
    pub(super) starts_once: Starts<'a>,
    pub(super) step_num: Vec<i64>,
    pub(super) step_seq: Vec<i64>,
    pub(super) step_at: Vec<i64>,
    pub(super) step_record: Vec<&'a [u8]>,
    pub(super) took_cancel: Vec<i64>,
    pub(super) consumed: Vec<i64>,
    /// The calls whose tasks go with their steps: workflow and tag.
    pub(super) call_num: Vec<i64>,
    pub(super) call_tag: Vec<i64>,
    pub(super) message_id: Vec<i64>,
    pub(super) message_receiver: Vec<i64>,
    pub(super) message_sender: Vec<i64>,
    pub(super) message_payload: Vec<&'a [u8]>,
    /// Whether the writing host delivers it (it runs the receiver); otherwise the receiver's
    /// owner takes it from the store.
    pub(super) message_local: Vec<bool>,
    /// Snapshots, one per workflow: a later one of the same workflow replaces an earlier one.
    pub(super) snapshot_num: Vec<i64>,
    pub(super) snapshot_seq: Vec<i64>,
    pub(super) snapshot_module: Vec<Text<'a>>,
    pub(super) snapshot_state: Vec<&'a [u8]>,
    /// Each snapshot's place in the columns above, by workflow.
    pub(super) snapshot_at: HashMap<i64, usize>,
    /// Messages to the host, kept once per sender and tag.
    pub(super) outbox_num: Vec<i64>,
    pub(super) outbox_tag: Vec<i64>,
    pub(super) outbox_at: Vec<i64>,
    pub(super) outbox_payload: Vec<&'a [u8]>,
    /// Workflows' ends, written after everything else of the segment: nothing else in a
    /// segment depends on a workflow's state, and what an end removes (its snapshot, its
    /// tasks) is removed also where the segment wrote it before the end. (A snapshot or a
    /// start of a workflow after its end begins a new segment.)
    pub(super) ends: Ends<'a>,
}

/// Workflows' ends, as the columns of the statement that writes them.
#[derive(Default)]
pub(super) struct Ends<'a> {
    pub(super) num: Vec<i64>,
    pub(super) state: Vec<i16>,
    pub(super) result: Vec<Option<&'a [u8]>>,
    pub(super) kind: Vec<Option<Text<'a>>>,
    pub(super) message: Vec<Option<Text<'a>>>,
    pub(super) at: Vec<i64>,
    /// The workflows ended: a second end of one is ignored, as the store ignores an end of a
    /// workflow that has ended.
    pub(super) ended: HashSet<i64>,
}

/// The workflow a start or a snapshot writes the row of, which its end removes or changes.
pub(super) fn reopens(op: &Op) -> Option<u64> {
    match op {
        Op::Start(w) | Op::StartOnce(w) => Some(w.num),
        Op::Snapshot(snapshot) => Some(snapshot.num),
        _ => None,
    }
}

impl<'a> Ends<'a> {
    /// Whether workflow `num` ends in these.
    pub(super) fn has(&self, num: u64) -> bool {
        i64::try_from(num).is_ok_and(|num| self.ended.contains(&num))
    }

    pub(super) fn add(&mut self, num: u64, ending: &'a Ending, at: u64) -> Result<(), String> {
        let num = int(num, "workflow")?;
        let at = int(at, "time")?;
        if !self.ended.insert(num) {
            return Ok(());
        }
        let (state, result, kind, message) = match ending {
            Ending::Done(result) => (1, Some(&result[..]), None, None),
            Ending::Failed { kind, message } => (2, None, Some(text(kind)), Some(text(message))),
        };
        self.num.push(num);
        self.state.push(state);
        self.result.push(result);
        self.kind.push(kind);
        self.message.push(message);
        self.at.push(at);
        Ok(())
    }
}

/// Workflows' starts, as the columns of their table.
#[derive(Default)]
pub(super) struct Starts<'a> {
    pub(super) num: Vec<i64>,
    pub(super) id: Vec<Text<'a>>,
    pub(super) parent: Vec<Option<i64>>,
    pub(super) module: Vec<Text<'a>>,
    pub(super) module_name: Vec<Text<'a>>,
    pub(super) entry: Vec<Text<'a>>,
    pub(super) input: Vec<&'a [u8]>,
    pub(super) started: Vec<i64>,
    pub(super) trace: Vec<Option<&'a str>>,
    /// The nearest ancestor not started in this batch (itself, for a top-level workflow): its
    /// tree is the workflow's.
    pub(super) root_of: Vec<i64>,
}

impl<'a> Starts<'a> {
    /// A workflow's start; `root_of` gives the root of each workflow started in the batch, so a
    /// child's tree is its parent's.
    pub(super) fn add(
        &mut self,
        w: &'a NewWorkflow,
        root_of: &mut HashMap<i64, i64>,
    ) -> Result<(), String> {
        let num = int(w.num, "workflow")?;
        let parent = w.parent.map(|p| int(p, "workflow")).transpose()?;
        let root = match parent {
            None => num,
            Some(parent) => root_of.get(&parent).copied().unwrap_or(parent),
        };
        root_of.insert(num, root);
        self.root_of.push(root);
        self.num.push(num);
        self.id.push(text(&w.id));
        self.parent.push(parent);
        self.module.push(text(&w.module));
        self.module_name.push(text(&w.module_name));
        self.entry.push(text(&w.entry));
        self.input.push(&w.input);
        self.started.push(int(w.started, "time")?);
        self.trace.push(w.trace.as_deref());
        Ok(())
    }

    pub(super) fn write<'p>(
        &'p self,
        client: &'p Client,
        statement: &'p Statement,
        owner: &'p Option<i64>,
        pipeline: &mut Pipeline<'p>,
    ) {
        if self.num.is_empty() {
            return;
        }
        pipeline.push_counted(
            client,
            statement,
            vec![
                &self.num,
                &self.id,
                &self.parent,
                &self.module,
                &self.module_name,
                &self.entry,
                &self.input,
                &self.started,
                &self.root_of,
                owner,
                &self.trace,
            ],
            self.num.len(),
        );
    }
}

impl Segment<'_> {
    pub(super) fn is_empty(&self) -> bool {
        self.module_hash.is_empty()
            && self.starts.num.is_empty()
            && self.starts_once.num.is_empty()
            && self.step_num.is_empty()
            && self.message_id.is_empty()
            && self.snapshot_num.is_empty()
            && self.outbox_num.is_empty()
            && self.ends.num.is_empty()
    }
}

/// A string for a `TEXT` column. PostgreSQL refuses the NUL character in text, and a guest
/// decides some of what is written (its failure messages, the entry points it spawns): a NUL is
/// written as U+FFFD, so that no guest can make a commit, and with it the host, fail.
pub(super) type Text<'a> = Cow<'a, str>;

pub(super) fn text(s: &str) -> Text<'_> {
    if s.contains('\0') {
        Cow::Owned(s.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(s)
    }
}

/// PostgreSQL keeps integers signed: numbers past `i64::MAX` do not occur (pids, message numbers
/// and times count up from small values), and are refused rather than wrapped.
pub(super) fn int(n: u64, what: &str) -> Result<i64, String> {
    i64::try_from(n).map_err(|_| format!("{what} {n} is larger than the store can hold"))
}

impl<'a> Segment<'a> {
    pub(super) fn write<'p>(
        &'p self,
        client: &'p Client,
        statements: &'p Statements,
        owner: &'p Option<i64>,
        pipeline: &mut Pipeline<'p>,
    ) {
        if !self.module_hash.is_empty() {
            pipeline.push(
                client,
                &statements.modules,
                vec![&self.module_hash, &self.module_bytes],
            );
        }
        self.starts
            .write(client, &statements.starts, owner, pipeline);
        self.starts_once
            .write(client, &statements.starts_once, owner, pipeline);
        if !self.message_id.is_empty() {
            pipeline.push(
                client,
                &statements.messages,
                vec![
                    &self.message_id,
                    &self.message_receiver,
                    &self.message_sender,
                    &self.message_payload,
                    owner,
                    &self.message_local,
                ],
            );
        }
        if !self.step_num.is_empty() {
            pipeline.push(
                client,
                &statements.steps,
                vec![
                    &self.step_num,
                    &self.step_seq,
                    &self.step_at,
                    &self.step_record,
                ],
            );
        }
        if !self.took_cancel.is_empty() {
            pipeline.push(client, &statements.took_cancel, vec![&self.took_cancel]);
        }
        if !self.consumed.is_empty() {
            pipeline.push(client, &statements.consumed, vec![&self.consumed]);
        }
        if !self.call_num.is_empty() {
            pipeline.push(
                client,
                &statements.calls_done,
                vec![&self.call_num, &self.call_tag],
            );
        }
        if !self.snapshot_num.is_empty() {
            pipeline.push(
                client,
                &statements.snapshots,
                vec![
                    &self.snapshot_num,
                    &self.snapshot_seq,
                    &self.snapshot_module,
                    &self.snapshot_state,
                ],
            );
        }
        if !self.outbox_num.is_empty() {
            pipeline.push(
                client,
                &statements.outbox,
                vec![
                    &self.outbox_num,
                    &self.outbox_tag,
                    &self.outbox_at,
                    &self.outbox_payload,
                ],
            );
        }
        let ends = &self.ends;
        if !ends.num.is_empty() {
            pipeline.push(
                client,
                &statements.ends,
                vec![
                    &ends.num,
                    &ends.state,
                    &ends.result,
                    &ends.kind,
                    &ends.message,
                    &ends.at,
                ],
            );
        }
    }
}

impl<'a> Segment<'a> {
    /// A step, the messages it took (but `elided` ones, never written) and a cancel it took.
    pub(super) fn add_step(
        &mut self,
        step: &'a NewStep,
        elided: &HashSet<u64>,
    ) -> Result<(), String> {
        let num = int(step.num, "workflow")?;
        self.step_num.push(num);
        self.step_seq.push(int(step.seq, "step")?);
        self.step_at.push(int(step.at, "time")?);
        self.step_record.push(&step.record);
        if step.took_cancel {
            self.took_cancel.push(num);
        }
        for id in step.consumed.iter().filter(|id| !elided.contains(id)) {
            self.consumed.push(int(*id, "message")?);
        }
        for tag in &step.calls_done {
            self.call_num.push(num);
            self.call_tag.push(int(*tag, "tag")?);
        }
        Ok(())
    }

    pub(super) fn add_message(&mut self, message: &'a NewMessage) -> Result<(), String> {
        self.message_id.push(int(message.id, "message")?);
        self.message_receiver
            .push(int(message.receiver, "workflow")?);
        self.message_sender.push(int(message.sender, "workflow")?);
        self.message_payload.push(&message.payload);
        self.message_local.push(message.local);
        Ok(())
    }

    /// A snapshot, in place of one of the same workflow earlier in the segment.
    pub(super) fn add_snapshot(&mut self, snapshot: &'a NewSnapshot) -> Result<(), String> {
        let num = int(snapshot.num, "workflow")?;
        let seq = int(snapshot.seq, "step")?;
        match self.snapshot_at.get(&num) {
            Some(&i) => {
                self.snapshot_seq[i] = seq;
                self.snapshot_module[i] = text(&snapshot.module);
                self.snapshot_state[i] = &snapshot.state;
            }
            None => {
                self.snapshot_at.insert(num, self.snapshot_num.len());
                self.snapshot_num.push(num);
                self.snapshot_seq.push(seq);
                self.snapshot_module.push(text(&snapshot.module));
                self.snapshot_state.push(&snapshot.state);
            }
        }
        Ok(())
    }
}
