//! One commit: a batch of [`Op`]s as a few statements in one transaction.
//!
//! Consecutive ops that commute (modules, starts, messages, steps, snapshots, ends) are gathered
//! into a segment and written with one statement per kind, over arrays, the ends last; a cancel,
//! a pause, a prune, a refusal, damage or an upgrade is written on its own, in its place, so the
//! batch means what it means in order.

mod segment;
mod statements;

use std::future::Future;
use std::pin::Pin;

use futures::future::{maybe_done, MaybeDone};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Error, Statement};

use super::{describe, Conn};

use crate::ops::elided;
use crate::{Committed, Op, StoreError, StoreErrorKind};
use segment::{int, reopens, text, Segment, Text};
use statements::Statements;

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

/// The rows (steps, messages, starts, snapshots, ends) of each part of a batch's plan; 0 for a
/// cancel or a refusal.
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
                    + s.snapshot_num.len()
                    + s.ends.num.len()
            }
            _ => 0,
        })
        .collect()
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
    use std::borrow::Cow;

    use super::*;
    use crate::{Ending, NewMessage, NewStep, NewWorkflow};

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

    fn workflow(num: u64, parent: Option<u64>) -> NewWorkflow {
        NewWorkflow {
            num,
            id: format!("w{num}"),
            parent,
            module: String::new(),
            module_name: String::new(),
            entry: String::new(),
            input: Vec::new(),
            started: 0,
            trace: None,
        }
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
        assert_eq!(plan.last_message, Some(5));
    }

    #[test]
    fn a_start_or_a_snapshot_after_its_workflows_end_begins_a_segment() {
        let snapshot = |num: u64| {
            Op::Snapshot(crate::NewSnapshot {
                num,
                seq: 1,
                module: String::new(),
                state: Vec::new(),
            })
        };
        let start = |num: u64| Op::Start(workflow(num, None));
        // Written after the end, in a segment of their own, as in order (no host writes
        // either); those of other workflows stay in the end's segment.
        let ops = vec![
            end(1, 1),
            snapshot(2),
            start(3),
            snapshot(1),
            step(3, 1, vec![]),
        ];
        assert_eq!(segments(&ops), vec![3, 2]);
        let ops = vec![end(1, 1), start(2), start(1), end(2, 2)];
        assert_eq!(segments(&ops), vec![2, 2]);
    }

    #[test]
    fn starts_that_give_way_are_written_apart_from_the_others() {
        let ops = vec![
            Op::StartOnce(workflow(1, None)),
            Op::Start(workflow(2, Some(1))),
            Op::StartOnce(workflow(3, None)),
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
