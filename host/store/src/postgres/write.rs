//! One commit: a batch of [`Op`]s as a few statements in one transaction.
//!
//! Consecutive ops that commute (modules, starts, messages, steps, snapshots, ends) are gathered
//! into a segment and written with one statement per kind, over arrays, the ends last; a cancel,
//! a pause, a prune, a refusal, damage or an upgrade is written on its own, in its place, so the
//! batch means what it means in order.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;

use futures::future::{maybe_done, MaybeDone};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Error, Statement};

use super::{describe, Conn};
use std::collections::{HashMap, HashSet};

use crate::ops::elided;
use crate::{
    Committed, Ending, NewMessage, NewSnapshot, NewStep, NewWorkflow, Op, StoreError,
    StoreErrorKind,
};

/// A batch, checked and laid out for writing.
pub(super) struct Plan<'a> {
    parts: Vec<Part<'a>>,
    last_message: Option<i64>,
    /// Written by a host that joined: the workflows it starts are its own.
    joined: bool,
}

enum Part<'a> {
    Segment(Box<Segment<'a>>),
    Cancel(i64),
    Pause(i64, bool),
    Prune(Vec<i64>, i64, i64),
    Refused(i64, Text<'a>),
    Damaged(i64, Option<Text<'a>>),
    Upgrade(i64, Text<'a>, Text<'a>, i64, bool),
}

/// Rows of ops that commute, by kind, as the columns of their tables.
#[derive(Default)]
struct Segment<'a> {
    module_hash: Vec<Text<'a>>,
    module_bytes: Vec<&'a [u8]>,
    starts: Starts<'a>,
    /// Top-level starts that give way to a workflow of the same id (`Op::StartOnce`).
    starts_once: Starts<'a>,
    step_num: Vec<i64>,
    step_seq: Vec<i64>,
    step_at: Vec<i64>,
    step_record: Vec<&'a [u8]>,
    took_cancel: Vec<i64>,
    consumed: Vec<i64>,
    /// The calls whose tasks go with their steps: workflow and tag.
    call_num: Vec<i64>,
    call_tag: Vec<i64>,
    message_id: Vec<i64>,
    message_receiver: Vec<i64>,
    message_sender: Vec<i64>,
    message_payload: Vec<&'a [u8]>,
    /// Whether the writing host delivers it (it runs the receiver); otherwise the receiver's
    /// owner takes it from the store.
    message_local: Vec<bool>,
    /// Snapshots, one per workflow: a later one of the same workflow replaces an earlier one.
    snapshot_num: Vec<i64>,
    snapshot_seq: Vec<i64>,
    snapshot_module: Vec<Text<'a>>,
    snapshot_state: Vec<&'a [u8]>,
    /// Each snapshot's place in the columns above, by workflow.
    snapshot_at: HashMap<i64, usize>,
    /// Messages to the host, kept once per sender and tag.
    outbox_num: Vec<i64>,
    outbox_tag: Vec<i64>,
    outbox_at: Vec<i64>,
    outbox_payload: Vec<&'a [u8]>,
    /// Workflows' ends, written after everything else of the segment: nothing else in a
    /// segment depends on a workflow's state, and what an end removes (its snapshot, its
    /// tasks) is removed also where the segment wrote it before the end. (A snapshot or a
    /// start of a workflow after its end begins a new segment.)
    ends: Ends<'a>,
}

/// Workflows' ends, as the columns of the statement that writes them.
#[derive(Default)]
struct Ends<'a> {
    num: Vec<i64>,
    state: Vec<i16>,
    result: Vec<Option<&'a [u8]>>,
    kind: Vec<Option<Text<'a>>>,
    message: Vec<Option<Text<'a>>>,
    at: Vec<i64>,
    /// The workflows ended: a second end of one is ignored, as the store ignores an end of a
    /// workflow that has ended.
    ended: HashSet<i64>,
}

/// The workflow a start or a snapshot writes the row of, which its end removes or changes.
fn reopens(op: &Op) -> Option<u64> {
    match op {
        Op::Start(w) | Op::StartOnce(w) => Some(w.num),
        Op::Snapshot(snapshot) => Some(snapshot.num),
        _ => None,
    }
}

impl<'a> Ends<'a> {
    /// Whether workflow `num` ends in these.
    fn has(&self, num: u64) -> bool {
        i64::try_from(num).is_ok_and(|num| self.ended.contains(&num))
    }

    fn add(&mut self, num: u64, ending: &'a Ending, at: u64) -> Result<(), String> {
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
struct Starts<'a> {
    num: Vec<i64>,
    id: Vec<Text<'a>>,
    parent: Vec<Option<i64>>,
    module: Vec<Text<'a>>,
    module_name: Vec<Text<'a>>,
    entry: Vec<Text<'a>>,
    input: Vec<&'a [u8]>,
    started: Vec<i64>,
    trace: Vec<Option<&'a str>>,
    /// The nearest ancestor not started in this batch (itself, for a top-level workflow): its
    /// tree is the workflow's.
    root_of: Vec<i64>,
}

impl<'a> Starts<'a> {
    /// A workflow's start; `root_of` gives the root of each workflow started in the batch, so a
    /// child's tree is its parent's.
    fn add(
        &mut self,
        w: &'a NewWorkflow,
        root_of: &mut std::collections::HashMap<i64, i64>,
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

    fn write<'p>(
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
    fn is_empty(&self) -> bool {
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
type Text<'a> = Cow<'a, str>;

fn text(s: &str) -> Text<'_> {
    if s.contains('\0') {
        Cow::Owned(s.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(s)
    }
}

/// PostgreSQL keeps integers signed: numbers past `i64::MAX` do not occur (pids, message numbers
/// and times count up from small values), and are refused rather than wrapped.
fn int(n: u64, what: &str) -> Result<i64, String> {
    i64::try_from(n).map_err(|_| format!("{what} {n} is larger than the store can hold"))
}

impl<'a> Plan<'a> {
    pub(super) fn new(ops: &'a [Op], joined: bool) -> Result<Plan<'a>, String> {
        let (elided, last_message) = elided(ops);
        let mut root_of: std::collections::HashMap<i64, i64> = std::collections::HashMap::new();
        let mut parts = Vec::new();
        let mut segment = Segment::default();
        for op in ops {
            // Ends go last in their segment: a start or a snapshot of a workflow the segment
            // ended (which no host writes) begins another, so the batch still means what it
            // means in order.
            if reopens(op).is_some_and(|num| segment.ends.has(num)) {
                parts.push(Part::Segment(Box::new(std::mem::take(&mut segment))));
            }
            match op {
                Op::Module { hash, bytes } => {
                    segment.module_hash.push(text(hash));
                    segment.module_bytes.push(bytes);
                }
                Op::Start(w) => segment.starts.add(w, &mut root_of)?,
                Op::StartOnce(w) => segment.starts_once.add(w, &mut root_of)?,
                Op::Step(step) => segment.add_step(step, &elided)?,
                Op::Message(message) => {
                    if !elided.contains(&message.id) {
                        segment.add_message(message)?;
                    }
                }
                Op::Snapshot(snapshot) => segment.add_snapshot(snapshot)?,
                Op::End { num, ending, at } => segment.ends.add(*num, ending, *at)?,
                Op::HostMessage(message) => {
                    segment.outbox_num.push(int(message.num, "workflow")?);
                    segment.outbox_tag.push(int(message.tag, "tag")?);
                    segment.outbox_at.push(int(message.at, "time")?);
                    segment.outbox_payload.push(&message.payload);
                }
                Op::PutSchedule(_)
                | Op::DeleteSchedule { .. }
                | Op::PauseSchedule { .. }
                | Op::AdvanceSchedule(_) => {
                    return Err(
                        "on PostgreSQL, schedules are written on a connection of their own, not \
                         through the journal"
                            .into(),
                    )
                }
                Op::NameModule { .. } => {
                    return Err(
                        "on PostgreSQL, a module's name is written in a transaction of its own \
                         (Submit::submit_module_name), not through the journal"
                            .into(),
                    )
                }
                Op::Reset(_) => {
                    return Err(
                        "on PostgreSQL, a reset is written in a transaction of its own \
                         (Cluster::reset), not through the journal"
                            .into(),
                    )
                }
                Op::TaskOutcome { .. } => {
                    return Err(
                        "on PostgreSQL, a task's outcome is kept in its row of the tasks, not \
                         through the journal"
                            .into(),
                    )
                }
                Op::Cancel { .. }
                | Op::Pause { .. }
                | Op::Prune { .. }
                | Op::Refused { .. }
                | Op::Damaged { .. }
                | Op::Upgrade { .. } => {
                    // In order with what comes before and after: the segment so far goes first.
                    if !segment.is_empty() {
                        parts.push(Part::Segment(Box::new(std::mem::take(&mut segment))));
                    }
                    parts.push(part_of(op)?);
                }
            }
        }
        if !segment.is_empty() {
            parts.push(Part::Segment(Box::new(segment)));
        }
        Ok(Plan {
            parts,
            last_message: last_message.map(|m| int(m, "message")).transpose()?,
            joined,
        })
    }

    /// Writes the batch in one transaction, as commit `batch` of host `host`. Every statement
    /// of it, from `BEGIN` to `COMMIT`, is sent before the first answer is read: one round trip.
    /// A statement that fails aborts the transaction (the server answers the rest with errors,
    /// and `COMMIT` with a rollback); the first failure is the one returned. Committed, it says
    /// whether every start was written (none gave way to a workflow of the same id).
    pub(super) fn commit(
        &self,
        conn: &mut Conn,
        host: i64,
        batch: i64,
    ) -> Result<Committed, Error> {
        // Prepared before the transaction: a statement prepared once serves every commit.
        let statements = Statements::prepare(conn)?;
        let client = &conn.client;
        let owner = self.joined.then_some(host);
        let mut pipeline = Pipeline::default();
        pipeline.push(client, &statements.begin, vec![]);
        pipeline.push(client, &statements.mark, vec![&host, &batch]);
        for part in &self.parts {
            match part {
                Part::Segment(s) => s.write(client, &statements, &owner, &mut pipeline),
                Part::Cancel(num) => pipeline.push(client, &statements.cancel, vec![num, &owner]),
                Part::Pause(num, paused) => {
                    pipeline.push(client, &statements.pause, vec![num, paused])
                }
                Part::Prune(roots, kept_before, marked_before) => {
                    pipeline.push(client, &statements.prune, vec![roots, kept_before]);
                    pipeline.push(
                        client,
                        &statements.prune_modules,
                        vec![marked_before, kept_before],
                    );
                }
                Part::Refused(id, why) => pipeline.push(client, &statements.refused, vec![id, why]),
                Part::Damaged(num, why) => {
                    pipeline.push(client, &statements.damaged, vec![num, why])
                }
                Part::Upgrade(num, from, to, steps, unowned) => pipeline.push(
                    client,
                    &statements.upgrade,
                    vec![num, from, to, steps, unowned],
                ),
            }
        }
        if let Some(last) = &self.last_message {
            pipeline.push(client, &statements.counter, vec![last]);
        }
        conn.block_on(pipeline.run(client, &statements.commit, &statements.rollback))
    }
}

type Params<'p> = Vec<&'p (dyn ToSql + Sync)>;
type Pending<'p> = Pin<Box<MaybeDone<Pin<Box<dyn Future<Output = Result<u64, Error>> + 'p>>>>>;

/// Statements sent one after another without waiting.
#[derive(Default)]
struct Pipeline<'p> {
    pending: Vec<Pending<'p>>,
    /// Statements that write rows only where none of the same key exists: each one's place in
    /// `pending` and the rows it writes when none exists.
    counted: Vec<(usize, u64)>,
}

impl<'p> Pipeline<'p> {
    fn push(&mut self, client: &'p Client, statement: &'p Statement, params: Params<'p>) {
        let execute: Pin<Box<dyn Future<Output = Result<u64, Error>> + 'p>> =
            Box::pin(client.execute_raw(statement, params));
        self.pending.push(Box::pin(maybe_done(execute)));
    }

    /// As [`push`](Self::push), for a statement that writes `rows` rows unless some give way:
    /// the commit says whether all were written.
    fn push_counted(
        &mut self,
        client: &'p Client,
        statement: &'p Statement,
        params: Params<'p>,
        rows: usize,
    ) {
        self.counted
            .push((self.pending.len(), u64::try_from(rows).unwrap_or(u64::MAX)));
        self.push(client, statement, params);
    }

    /// Sends every statement, in order (each is sent when first polled), then `COMMIT`, then
    /// reads the answers: the first error, if any. A statement that failed before it was sent
    /// (its parameters could not be encoded) leaves no trace on the server, which would commit
    /// the rest: then `ROLLBACK` goes instead of `COMMIT`. Committed: whether every counted
    /// statement wrote all its rows.
    async fn run(
        mut self,
        client: &'p Client,
        commit: &'p Statement,
        rollback: &'p Statement,
    ) -> Result<Committed, Error> {
        for pending in &mut self.pending {
            let _ = futures::poll!(pending.as_mut());
        }
        let unsent = self
            .pending
            .iter()
            .any(|p| matches!(&**p, MaybeDone::Done(Err(_))));
        self.push(client, if unsent { rollback } else { commit }, vec![]);
        if let Some(last) = self.pending.last_mut() {
            let _ = futures::poll!(last.as_mut());
        }
        let mut first = None;
        let mut every_start_written = true;
        for (at, pending) in self.pending.iter_mut().enumerate() {
            pending.as_mut().await;
            match pending.as_mut().take_output() {
                Some(Err(error)) => {
                    first.get_or_insert(error);
                }
                Some(Ok(rows)) => {
                    if let Some((_, expected)) = self.counted.iter().find(|(i, _)| *i == at) {
                        every_start_written &= rows == *expected;
                    }
                }
                None => {}
            }
        }
        first.map_or(
            Ok(Committed {
                every_start_written,
            }),
            Err,
        )
    }
}

/// Writes a segment's starts. A workflow's tree is its nearest ancestor's outside the batch
/// (whose row exists), or its own.
macro_rules! starts {
    () => {
        "INSERT INTO workflows (num, id, parent, module, module_name, entry, input, \
     started, root, owner, trace) \
     SELECT t.num, t.id, t.parent, t.module, t.module_name, t.entry, t.input, \
     t.started, CASE WHEN t.root_of = t.num THEN t.num ELSE \
     coalesce((SELECT w.root FROM workflows w WHERE w.num = t.root_of), t.root_of) \
     END, $10, t.trace \
     FROM unnest($1::int8[], $2::text[], $3::int8[], $4::text[], $5::text[], \
     $6::text[], $7::bytea[], $8::int8[], $9::int8[], $11::text[]) \
     AS t(num, id, parent, module, module_name, entry, input, started, root_of, trace)"
    };
}

const STARTS: &str = starts!();
/// The starts that give way to a workflow of the same id.
const STARTS_ONCE: &str = concat!(starts!(), " ON CONFLICT (id) DO NOTHING");

struct Statements {
    begin: Statement,
    rollback: Statement,
    mark: Statement,
    commit: Statement,
    modules: Statement,
    starts: Statement,
    starts_once: Statement,
    messages: Statement,
    steps: Statement,
    took_cancel: Statement,
    consumed: Statement,
    calls_done: Statement,
    snapshots: Statement,
    ends: Statement,
    cancel: Statement,
    refused: Statement,
    damaged: Statement,
    pause: Statement,
    upgrade: Statement,
    prune: Statement,
    prune_modules: Statement,
    outbox: Statement,
    counter: Statement,
}

impl Statements {
    fn prepare(conn: &mut Conn) -> Result<Statements, Error> {
        Ok(Statements {
            begin: conn.prepare("BEGIN")?,
            rollback: conn.prepare("ROLLBACK")?,
            // Fails the transaction unless the host is alive (its lease holds) or a client.
            mark: conn.prepare("SELECT mark($1, $2)")?,
            commit: conn.prepare("COMMIT")?,
            // Stored again, a module's time moves on (a prune keeps what was stored after its
            // cutoff); its bytes never change (they are its hash's).
            modules: conn.prepare(
                "INSERT INTO modules (hash, bytes, kept) \
                 SELECT h, b, (extract(epoch FROM now()) * 1000)::int8 \
                 FROM unnest($1::text[], $2::bytea[]) AS t(h, b) \
                 ON CONFLICT (hash) DO UPDATE SET kept = excluded.kept, unused_since = NULL",
            )?,
            starts: conn.prepare(STARTS)?,
            starts_once: conn.prepare(STARTS_ONCE)?,
            // The writing host has the message in memory (delivered, or to be, if it runs the
            // receiver); the receiver's owner takes it otherwise.
            messages: conn.prepare(
                "INSERT INTO messages (id, receiver, sender, payload, delivered_to) \
                 SELECT t.id, t.receiver, t.sender, t.payload, CASE WHEN t.local THEN $5::int8 END \
                 FROM unnest($1::int8[], $2::int8[], $3::int8[], $4::bytea[], $6::bool[]) \
                 AS t(id, receiver, sender, payload, local)",
            )?,
            steps: conn.prepare(
                "INSERT INTO steps (num, seq, at, record) \
                 SELECT * FROM unnest($1::int8[], $2::int8[], $3::int8[], $4::bytea[])",
            )?,
            took_cancel: conn
                .prepare("UPDATE workflows SET cancel = 2 WHERE num = ANY($1::int8[])")?,
            consumed: conn.prepare("DELETE FROM messages WHERE id = ANY($1::int8[])")?,
            // A call's task goes with the step that took its outcome (or gave it up): until
            // then it waits for the workflow's next owner, outcome and attempts included.
            calls_done: conn.prepare(
                "DELETE FROM tasks t USING unnest($1::int8[], $2::int8[]) AS d(num, tag) \
                 WHERE t.workflow = d.num AND t.tag = d.tag",
            )?,
            snapshots: conn.prepare(
                "INSERT INTO snapshots (num, seq, module, state) \
                 SELECT * FROM unnest($1::int8[], $2::int8[], $3::text[], $4::bytea[]) \
                 ON CONFLICT (num) DO UPDATE SET seq = excluded.seq, module = excluded.module, \
                 state = excluded.state",
            )?,
            // Its snapshot is of no use once it ended. Messages it never read stay, counted as
            // unread: they were acknowledged to whoever sent them.
            // Nor are the tasks of its calls: nothing will take their outcomes.
            // A workflow that ended already stays as it ended.
            ends: conn.prepare(
                "WITH e AS (SELECT * FROM unnest($1::int8[], $2::int2[], $3::bytea[], \
                 $4::text[], $5::text[], $6::int8[]) AS t(num, state, result, kind, message, at)), \
                 ended AS (UPDATE workflows w SET state = e.state, result = e.result, \
                 error_kind = e.kind, error = e.message, finished = e.at \
                 FROM e WHERE w.num = e.num AND w.state = 0), \
                 calls AS (DELETE FROM tasks t USING e WHERE t.workflow = e.num) \
                 DELETE FROM snapshots s USING e WHERE s.num = e.num",
            )?,
            // Delivered by the host that asks (its own workflow, or its child).
            cancel: conn.prepare(
                "UPDATE workflows SET cancel = 1, cancel_seen = $2 WHERE num = $1 AND cancel = 0",
            )?,
            refused: conn.prepare("UPDATE messages SET refused = $2 WHERE id = $1")?,
            damaged: conn.prepare("UPDATE workflows SET damaged = $2 WHERE num = $1")?,
            pause: conn.prepare("UPDATE workflows SET paused = $2 WHERE num = $1 AND state = 0")?,
            upgrade: conn.prepare(
                "UPDATE workflows SET module = $3 WHERE num = $1 AND state = 0 AND module = $2 \
                 AND (SELECT COALESCE(MAX(seq), 0) FROM steps WHERE num = $1) = $4 \
                 AND (NOT $5 OR owner IS NULL)",
            )?,
            // The finished trees of these roots, with everything of theirs; a tree with an
            // unfinished workflow is left. One statement sees one snapshot: the modules no
            // workflow left uses are those no workflow outside the pruned trees does.
            prune: conn.prepare(
                "WITH RECURSIVE tree(root, num, state) AS ( \
                   SELECT num, num, state FROM workflows \
                     WHERE num = ANY($1::int8[]) AND parent IS NULL AND state <> 0 \
                   UNION ALL SELECT t.root, w.num, w.state FROM workflows w JOIN tree t \
                     ON w.parent = t.num WHERE w.parent IS NOT NULL), \
                 whole AS (SELECT num FROM tree \
                   WHERE root NOT IN (SELECT root FROM tree WHERE state = 0)), \
                 s AS (DELETE FROM steps WHERE num IN (SELECT num FROM whole)), \
                 sn AS (DELETE FROM snapshots WHERE num IN (SELECT num FROM whole)), \
                 o AS (DELETE FROM outbox WHERE num IN (SELECT num FROM whole)), \
                 tk AS (DELETE FROM tasks WHERE workflow IN (SELECT num FROM whole)), \
                 m AS (DELETE FROM messages WHERE receiver IN (SELECT num FROM whole) \
                   OR (refused IS NOT NULL AND sender IN (SELECT num FROM whole))), \
                 w AS (DELETE FROM workflows WHERE num IN (SELECT num FROM whole) \
                   RETURNING module) \
                 UPDATE modules SET unused_since = (extract(epoch FROM now()) * 1000)::int8 \
                 WHERE hash IN (SELECT module FROM w) AND kept < $2 AND unused_since IS NULL \
                   AND NOT EXISTS (SELECT 1 FROM workflows x WHERE x.module = modules.hash \
                     AND x.num NOT IN (SELECT num FROM whole)) \
                   AND NOT EXISTS (SELECT 1 FROM snapshots y WHERE y.module = modules.hash \
                     AND y.num NOT IN (SELECT num FROM whole)) \
                   AND NOT EXISTS (SELECT 1 FROM schedules z WHERE z.module = modules.hash)",
            )?,
            // After the prune's own statement, in its transaction: the modules marked unused
            // long enough ago (a start that read its module as there before the mark has been
            // journaled by then) and unused still go; those used again lose their mark.
            prune_modules: conn.prepare(
                "WITH used AS (UPDATE modules SET unused_since = NULL \
                   WHERE unused_since IS NOT NULL AND (kept >= $2 \
                     OR EXISTS (SELECT 1 FROM workflows x WHERE x.module = modules.hash) \
                     OR EXISTS (SELECT 1 FROM snapshots y WHERE y.module = modules.hash) \
                     OR EXISTS (SELECT 1 FROM schedules z WHERE z.module = modules.hash)) \
                   RETURNING hash) \
                 , gone AS (DELETE FROM modules WHERE unused_since < $1 AND kept < $2 \
                   AND hash NOT IN (SELECT hash FROM used) \
                   AND NOT EXISTS (SELECT 1 FROM workflows x WHERE x.module = modules.hash) \
                   AND NOT EXISTS (SELECT 1 FROM snapshots y WHERE y.module = modules.hash) \
                   AND NOT EXISTS (SELECT 1 FROM schedules z WHERE z.module = modules.hash) \
                   AND NOT EXISTS (SELECT 1 FROM module_names n WHERE n.hash = modules.hash \
                     AND n.version = (SELECT max(version) FROM module_names l \
                                      WHERE l.name = n.name)) \
                   RETURNING hash) \
                 DELETE FROM module_names WHERE hash IN (SELECT hash FROM gone)",
            )?,
            outbox: conn.prepare(
                "INSERT INTO outbox (num, tag, at, payload) \
                 SELECT * FROM unnest($1::int8[], $2::int8[], $3::int8[], $4::bytea[]) \
                 ON CONFLICT (num, tag) DO NOTHING",
            )?,
            counter: conn.prepare(
                "UPDATE counters SET value = greatest(value, $1) WHERE name = 'messages'",
            )?,
        })
    }
}

impl<'a> Segment<'a> {
    fn write<'p>(
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

/// The number of the last commit of `host`.
pub(super) fn committed(conn: &mut Conn, host: i64) -> Result<i64, Error> {
    // Locking the row waits for a transaction of this host's still running on the server.
    Ok(conn
        .query_one("SELECT batch FROM hosts WHERE id = $1 FOR UPDATE", &[&host])?
        .get(0))
}

/// A commit the database refused, said so that the user knows what to do.
pub(super) fn failure(url: &str, error: &Error) -> StoreError {
    let (kind, why) = match error.code() {
        Some(code) if code.code() == super::schema::LEASE_LOST => (
            StoreErrorKind::Fenced,
            "this host lost its lease (it could not renew it in time: paused, cut off from the \
             database, or overloaded), and another host may have taken its workflows over; its \
             workflows stop here, where their journals end, and whoever owns them now goes on"
                .to_string(),
        ),
        Some(code) if *code == SqlState::DISK_FULL => (
            StoreErrorKind::Full,
            "the database server's disk is full: free space and start again; what was written \
             before resumes"
                .to_string(),
        ),
        Some(code) if *code == SqlState::READ_ONLY_SQL_TRANSACTION => (
            StoreErrorKind::Unavailable,
            "the database is read-only (a standby, or default_transaction_read_only): point \
             --store at the primary and start again; what was written before resumes"
                .to_string(),
        ),
        Some(code) if *code == SqlState::UNIQUE_VIOLATION => {
            let constraint = error
                .as_db_error()
                .and_then(|db| db.constraint())
                .unwrap_or_default();
            let why = match constraint {
                "steps_pkey" => format!(
                    "a step is in the store already ({}): does another host write to this \
                     store's workflows?",
                    describe(error)
                ),
                "workflows_id_key" => format!(
                    "a workflow with this id is in the store already ({})",
                    describe(error)
                ),
                _ => describe(error),
            };
            (StoreErrorKind::Integrity, why)
        }
        _ => (super::conn::kind_of(error), describe(error)),
    };
    StoreError::new(
        kind,
        format_args!("could not write to the store {url}: {why}"),
    )
}

/// The rows (steps, messages, starts, ends) of each part of a batch's plan; 0 for a cancel or a
/// refusal.
#[cfg(test)]
fn segments(ops: &[Op]) -> Vec<usize> {
    Plan::new(ops, false)
        .unwrap()
        .parts
        .iter()
        .map(|p| match p {
            Part::Segment(s) => {
                s.step_num.len()
                    + s.message_id.len()
                    + s.starts.num.len()
                    + s.starts_once.num.len()
                    + s.ends.num.len()
            }
            _ => 0,
        })
        .collect()
}

impl<'a> Segment<'a> {
    /// A step, the messages it took (but `elided` ones, never written) and a cancel it took.
    fn add_step(&mut self, step: &'a NewStep, elided: &HashSet<u64>) -> Result<(), String> {
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

    fn add_message(&mut self, message: &'a NewMessage) -> Result<(), String> {
        self.message_id.push(int(message.id, "message")?);
        self.message_receiver
            .push(int(message.receiver, "workflow")?);
        self.message_sender.push(int(message.sender, "workflow")?);
        self.message_payload.push(&message.payload);
        self.message_local.push(message.local);
        Ok(())
    }

    /// A snapshot, in place of one of the same workflow earlier in the segment.
    fn add_snapshot(&mut self, snapshot: &'a NewSnapshot) -> Result<(), String> {
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

/// The part of its own an op written in order takes: a cancel, a refusal, damage.
fn part_of(op: &Op) -> Result<Part<'_>, String> {
    Ok(match op {
        Op::Cancel { num } => Part::Cancel(int(*num, "workflow")?),
        Op::Pause { num, paused } => Part::Pause(int(*num, "workflow")?, *paused),
        Op::Prune {
            roots,
            kept_before,
            marked_before,
        } => Part::Prune(
            roots
                .iter()
                .map(|root| int(*root, "workflow"))
                .collect::<Result<_, _>>()?,
            int(*kept_before, "time")?,
            int(*marked_before, "time")?,
        ),
        Op::Refused { id, error } => Part::Refused(int(*id, "message")?, text(error)),
        Op::Damaged { num, why } => Part::Damaged(int(*num, "workflow")?, why.as_deref().map(text)),
        Op::Upgrade {
            num,
            from,
            to,
            steps,
            unowned,
        } => Part::Upgrade(
            int(*num, "workflow")?,
            text(from),
            text(to),
            int(*steps, "step")?,
            *unowned,
        ),
        _ => unreachable!(
            "only cancels, pauses, prunes, refusals, damage and upgrades are parts of their own"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NewMessage, NewStep};

    fn step(num: u64, seq: u64, consumed: Vec<u64>) -> Op {
        Op::Step(NewStep {
            num,
            seq,
            at: 0,
            record: Vec::new(),
            consumed,
            took_cancel: false,
            calls_done: Vec::new(),
        })
    }

    fn message(id: u64, receiver: u64) -> Op {
        Op::Message(NewMessage {
            id,
            receiver,
            sender: 0,
            payload: Vec::new(),
            local: true,
        })
    }

    fn end(num: u64, result: u8) -> Op {
        Op::End {
            num,
            ending: Ending::Done(vec![result]),
            at: 0,
        }
    }

    #[test]
    fn cancels_and_refusals_split_a_batch_and_the_rest_is_gathered() {
        let ops = vec![
            step(1, 1, vec![]),
            end(1, 1),
            message(5, 2),
            step(2, 1, vec![5]),
            end(2, 2),
            // A second end of a workflow that ended is ignored.
            end(1, 3),
            Op::Cancel { num: 3 },
            step(3, 1, vec![]),
            Op::Refused {
                id: 9,
                error: "full".into(),
            },
        ];
        // The message taken in the same batch is not written: 2 steps and 2 ends, then the
        // cancel, then 1 step, then the refusal.
        assert_eq!(segments(&ops), vec![4, 0, 1, 0]);
        let plan = Plan::new(&ops, false).unwrap();
        let Part::Segment(first) = &plan.parts[0] else {
            panic!("a segment comes first")
        };
        assert!(first.consumed.is_empty());
        assert_eq!(first.ends.num, [1, 2]);
        assert_eq!(first.ends.result, [Some(&[1u8][..]), Some(&[2u8][..])]);
        // A snapshot of a workflow after its end (which no host writes) is written after it,
        // in a segment of its own, as in order; one of another workflow is not.
        let snapshot = |num: u64| {
            Op::Snapshot(crate::NewSnapshot {
                num,
                seq: 1,
                module: String::new(),
                state: Vec::new(),
            })
        };
        let ops = vec![end(1, 1), snapshot(2), snapshot(1), step(3, 1, vec![])];
        assert_eq!(segments(&ops), vec![1, 1]);
        assert_eq!(plan.last_message, Some(5));
    }

    #[test]
    fn starts_that_give_way_are_written_apart_from_the_others() {
        let start = |num: u64, parent: Option<u64>| NewWorkflow {
            num,
            id: format!("w{num}"),
            parent,
            module: String::new(),
            module_name: String::new(),
            entry: String::new(),
            input: Vec::new(),
            started: 0,
            trace: None,
        };
        let ops = vec![
            Op::StartOnce(start(1, None)),
            Op::Start(start(2, Some(1))),
            Op::StartOnce(start(3, None)),
            step(1, 1, vec![]),
        ];
        assert_eq!(segments(&ops), vec![4]);
        let plan = Plan::new(&ops, true).unwrap();
        let Part::Segment(segment) = &plan.parts[0] else {
            panic!("one segment")
        };
        assert_eq!(segment.starts_once.num, [1, 3]);
        assert_eq!(segment.starts.num, [2]);
        // The child started in the batch is of its parent's tree.
        assert_eq!(segment.starts.root_of, [1]);
    }

    #[test]
    fn a_nul_in_text_is_written_as_a_replacement_character() {
        assert_eq!(text("bad\0news"), "bad\u{FFFD}news");
        assert!(matches!(text("fine"), Cow::Borrowed("fine")));
    }

    #[test]
    fn numbers_past_what_postgres_holds_are_refused() {
        let error = Plan::new(&[step(u64::MAX, 1, vec![])], false)
            .err()
            .unwrap();
        assert!(error.contains("larger than the store can hold"), "{error}");
    }
}
