//! A store's roles, one trait each, so that the compiler (not a run-time error) says what a store
//! can do: [`Read`] (what every store reads back), [`Journal`] (what a host writes: both stores),
//! [`Cluster`] (what only a store hosts share does: join, renew, claim, listen, take) and
//! [`Submit`] (what a client writes for hosts to run: starts, messages, cancels).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use super::{
    HostInfo, HostMessage, HostRow, ModuleName, NewMessage, NewSnapshot, NewWorkflow, Op,
    ScheduleRow, State, Step, StoreResult, StoredMessage, Wake, Workflow,
};

/// Which workflows a listing shows (every field narrows it; none: all of them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only those where they stand so.
    pub state: Option<State>,
    /// Only those that cancelled (`Some(true)`), or that did not (`Some(false)`).
    pub cancelled: Option<bool>,
    /// Only those of this entry point.
    pub entry: Option<String>,
    /// Only those whose id starts so.
    pub prefix: Option<String>,
    /// Only those started before this (milliseconds since the Unix epoch).
    pub started_before: Option<u64>,
    /// Only those started at or after this.
    pub started_after: Option<u64>,
    /// Only top-level workflows (not the children they spawned).
    pub top_level: bool,
    /// Only the children of the workflow numbered so.
    pub parent: Option<u64>,
    /// Of the unfinished: only those held so (paused by an operator, or damaged), or neither.
    pub held: Option<Held>,
    /// A page stops before the workflow that would take its inputs and results past this many
    /// bytes (it holds at least one).
    pub max_bytes: Option<u64>,
}

impl Filter {
    /// Whether this filter narrows by entry point at most, so that the counts each store keeps
    /// by entry point answer it (its `workflow_counts`) without reading the workflows.
    pub(crate) fn counted_by_entry(&self) -> bool {
        let Filter {
            state,
            cancelled,
            entry: _,
            prefix,
            started_before,
            started_after,
            top_level,
            parent,
            held,
            max_bytes: _,
        } = self;
        state.is_none()
            && held.is_none()
            && cancelled.is_none()
            && prefix.is_none()
            && started_before.is_none()
            && started_after.is_none()
            && !top_level
            && parent.is_none()
    }
}

/// Why an unfinished workflow takes no step, if it is held: an operator paused it, or its
/// journal cannot be read back (damaged, which wins over paused). `No`: neither, it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// Neither paused nor damaged.
    No,
    /// Paused, and not damaged.
    Paused,
    /// Damaged (paused or not).
    Damaged,
}

/// Which finished workflows a prune removes ([`Read::prunable`]): top-level ones that finished
/// before a time, of one status or any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PruneFilter {
    /// Finished before this, in milliseconds since the Unix epoch.
    pub finished_before: u64,
    /// Only those that ended so (`State::Done` or `State::Failed`), and of those failed, only
    /// those cancelled (`Some(true)`) or not (`Some(false)`).
    pub state: Option<State>,
    /// See `state`.
    pub cancelled: Option<bool>,
}

/// A finished top-level workflow a prune may remove ([`Read::prunable`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PruneCandidate {
    /// Its number.
    pub root: u64,
    /// When it finished: with `root`, where the next page of candidates starts.
    pub finished: u64,
    /// The workflows of its tree, itself included.
    pub workflows: u64,
    /// Whether one of them has not finished (the tree is then left).
    pub unfinished: bool,
}

/// What [`Read::tails`] hands over for each workflow: its number, its latest snapshot and its
/// steps after it.
pub type Visit<'a> = &'a mut dyn FnMut(u64, Option<NewSnapshot>, Vec<Step>) -> StoreResult<()>;

/// What every store reads back.
pub trait Read: Send {
    /// The workflow started under `id`.
    fn workflow(&mut self, id: &str) -> StoreResult<Option<Workflow>>;

    /// The workflow numbered `num`.
    fn workflow_by_num(&mut self, num: u64) -> StoreResult<Option<Workflow>>;

    /// Every workflow (or every unfinished one), by number.
    fn workflows(&mut self, unfinished_only: bool) -> StoreResult<Vec<Workflow>>;

    /// Up to `limit` workflows that `filter` lets through, numbered after `after`, by number:
    /// a page of a listing, read with the index on numbers (never the whole table).
    fn page(&mut self, filter: &Filter, after: u64, limit: usize) -> StoreResult<Vec<Workflow>>;

    /// The steps of workflow `num` after `after`, in order.
    fn steps(&mut self, num: u64, after: u64) -> StoreResult<Vec<Step>> {
        self.step_page(num, after, None)
    }

    /// Up to `limit` steps (all of them with `None`) of workflow `num` after `after`, in order.
    fn step_page(&mut self, num: u64, after: u64, limit: Option<usize>) -> StoreResult<Vec<Step>>;

    /// The sizes of the records of up to `limit` steps of workflow `num` after `after`, in
    /// order: what a page of them would hold, read without the records.
    fn step_sizes(&mut self, num: u64, after: u64, limit: usize) -> StoreResult<Vec<u64>>;

    /// The sizes of up to `limit` messages workflow `num` sent the host after tag `after`, in
    /// order, read without the messages.
    fn host_message_sizes(&mut self, num: u64, after: u64, limit: usize) -> StoreResult<Vec<u64>>;

    /// For a recovery: hands `visit`, for each of `nums` (ascending, each once), the workflow's
    /// latest snapshot and its steps after it (all of them when it has none), in order. A store
    /// may read them in one pass; this one reads them workflow by workflow.
    fn tails(&mut self, nums: &[u64], visit: Visit<'_>) -> StoreResult<()> {
        for &num in nums {
            let snapshot = self.snapshot(num)?;
            let steps = self.steps(num, snapshot.as_ref().map_or(0, |s| s.seq))?;
            visit(num, snapshot, steps)?;
        }
        Ok(())
    }

    /// The latest snapshot of workflow `num`, if it has one.
    fn snapshot(&mut self, num: u64) -> StoreResult<Option<NewSnapshot>>;

    /// The bytes of the module with this hash.
    fn module(&mut self, hash: &str) -> StoreResult<Option<Vec<u8>>>;

    /// Whether the store keeps the module with SHA-256 `hash` (without reading its bytes).
    fn has_module(&mut self, hash: &str) -> StoreResult<bool> {
        Ok(self.module(hash)?.is_some())
    }

    /// The outcome an activity worker gave durable workflow `num`'s call `tag`, if the store
    /// keeps it still (see `Op::TaskOutcome`; only the SQLite store keeps these).
    fn task_outcome(&mut self, num: u64, tag: u64) -> StoreResult<Option<Vec<u8>>> {
        let _ = (num, tag);
        Ok(None)
    }

    /// Every schedule, by id.
    fn schedules(&mut self) -> StoreResult<Vec<ScheduleRow>>;

    /// Schedule `id`.
    fn schedule(&mut self, id: &str) -> StoreResult<Option<ScheduleRow>>;

    /// The messages a recovery delivers or reports, by number: those waiting for unfinished
    /// workflows, and those refused to unfinished senders (who may not have heard why). The
    /// messages a workflow never read before it ended stay in the store, counted in
    /// [`Workflow::unread`], but are not among them.
    fn messages(&mut self) -> StoreResult<Vec<StoredMessage>>;

    /// The messages clients (not workflows) sent workflow `num` that it never read, in number
    /// order: what a reset hands its new run.
    fn unread_from_clients(&mut self, num: u64) -> StoreResult<Vec<NewMessage>>;

    /// The refused messages sent by `senders`: why, for those that had not heard before a
    /// restart.
    fn refused_from(&mut self, senders: &[u64]) -> StoreResult<Vec<StoredMessage>>;

    /// Up to `limit` messages workflow `num` sent the host with a tag after `after`, in order.
    fn host_messages(
        &mut self,
        num: u64,
        after: u64,
        limit: usize,
    ) -> StoreResult<Vec<HostMessage>>;

    /// For each of the workflows numbered `nums` that sent the host a message, the tag of its
    /// latest.
    fn latest_host_messages(&mut self, nums: &[u64]) -> StoreResult<Vec<(u64, u64)>>;

    /// Every module the store keeps: its hash and its size in bytes, by hash.
    fn module_list(&mut self) -> StoreResult<Vec<(String, u64)>>;

    /// Every version of every module name, by name, then version.
    fn module_names(&mut self) -> StoreResult<Vec<ModuleName>>;

    /// Version `version` of module name `name` (`None`: its latest), if there is one.
    fn module_named(&mut self, name: &str, version: Option<u64>)
        -> StoreResult<Option<ModuleName>>;

    /// Those of the workflows numbered `nums` that have finished.
    fn finished_among(&mut self, nums: &[u64]) -> StoreResult<Vec<u64>>;

    /// How many workflows have not finished.
    fn count_running(&mut self) -> StoreResult<u64>;

    /// How many workflows `filter` lets through stand each way (its state, its cancel, its page
    /// size and cursor are not looked at).
    fn counts(&mut self, filter: &Filter) -> StoreResult<StateCounts>;

    /// Up to `limit` top-level workflows `filter` lets through, in the order they finished
    /// (then by number), after `after` (a candidate's `(finished, root)`), each with the size of
    /// its tree and whether all of it has finished.
    fn prunable(
        &mut self,
        filter: &PruneFilter,
        after: (u64, u64),
        limit: usize,
    ) -> StoreResult<Vec<PruneCandidate>>;
}

/// How many workflows stand each way ([`Read::counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateCounts {
    /// Not finished (paused and damaged ones included).
    pub running: u64,
    /// Of those not finished, paused and not damaged.
    pub paused: u64,
    /// Of those not finished, damaged.
    pub damaged: u64,
    /// Finished with a result.
    pub completed: u64,
    /// Finished with a failure other than a cancel.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
}

impl StateCounts {
    /// Adds `n` workflows in state `state` (a store's code), cancelled or not.
    pub(crate) fn add(&mut self, state: super::State, cancelled: bool, n: u64) {
        match state {
            super::State::Running => self.running += n,
            super::State::Done => self.completed += n,
            super::State::Failed if cancelled => self.cancelled += n,
            super::State::Failed => self.failed += n,
        }
    }
}

/// What a commit says beyond that it is on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Committed {
    /// Whether every start of the batch was written (an [`Op::Start`] is, or the commit fails;
    /// an [`Op::StartOnce`] gives way to a workflow of the same id). `false`: some may have
    /// given way, and who won is read from the store (also when the store cannot tell, as
    /// after a commit whose answer was lost with its connection).
    pub every_start_written: bool,
}

/// What a host writes: its journal. Writes come in batches from one writer; reads may come from
/// another connection at the same time ([`Journal::reader`]).
pub trait Journal: Read {
    /// Another connection to the same store, for reading while this one writes.
    fn reader(&self) -> StoreResult<Box<dyn Journal>>;

    /// Writes `ops` in one transaction, durably (as the store's sync setting says) before it
    /// returns.
    fn commit(&mut self, ops: &[Op]) -> StoreResult<Committed>;

    /// Work the store does between commits, after the steps of the last one were let go (the
    /// SQLite store moves its log of steps into the table ordered by workflow once the log is
    /// long, or whenever `all`).
    fn tidy(&mut self, all: bool) -> StoreResult<()>;

    /// The highest workflow number and message number in the store (0 when none). For a host
    /// that joined a shared store, the start of the range of numbers it gives.
    fn high_water(&mut self) -> StoreResult<(u64, u64)>;
}

/// What only a store hosts share does: hosts join it with a lease, claim trees of workflows,
/// and take the messages and cancels written for the workflows they own.
pub trait Cluster: Send {
    /// Another connection to the store, of the same host.
    fn connection(&self) -> StoreResult<Box<dyn Cluster>>;

    /// Joins the hosts that share this store, with a lease of `lease` (renewed with
    /// [`renew`](Self::renew)); `name` says who it is: the host's number. The connections made
    /// from the same store (its journal's included) act as that host from then on.
    fn join(&mut self, lease: Duration, name: &str) -> StoreResult<u64>;

    /// Renews the lease: `false` if it is lost; an error if the store could not be reached in
    /// time (try again).
    fn renew(&mut self) -> StoreResult<bool>;

    /// Gives back workflows this host claimed and could not start, for another to claim; with
    /// `wake`, hosts listening are woken to claim them at once (without, at their next poll).
    fn unclaim(&mut self, nums: &[u64], wake: bool) -> StoreResult<()>;

    /// Takes up to `limit` trees of unfinished workflows (a top-level workflow and everything
    /// it spawned) that no live host owns, or only the tree of workflow `id`: the numbers of
    /// the workflows this host now owns.
    fn claim(&mut self, limit: usize, id: Option<&str>) -> StoreResult<Vec<u64>>;

    /// Writes a reset (see [`Reset`](crate::Reset)) in a transaction of its own, its new run
    /// owned by no host (for one to claim): whether it was written (not when the id no longer
    /// names the finished run it resets).
    fn reset(&mut self, reset: &crate::Reset) -> StoreResult<bool>;

    /// How many unfinished workflows no other host is known to run: none owns them, or the
    /// host that does is dead, let its lease run out, or has not renewed it since this host
    /// joined (it may have died). They are claimable now or once that lease runs out.
    fn claimable(&mut self) -> StoreResult<u64>;

    /// Gives back every unfinished workflow this host owns and ends its lease.
    fn release(&mut self) -> StoreResult<()>;

    /// Calls `wake` whenever a client or a host writes work for hosts to take (a start, a
    /// message, a cancel, workflows given back), from a thread of the store's own, until `stop`
    /// is set.
    fn listen(&self, wake: Wake, stop: Arc<AtomicBool>) -> StoreResult<()>;

    /// Takes the messages waiting for workflows this host owns that it does not have yet (from
    /// clients, or workflows on other hosts), or, given `receivers`, every message waiting for
    /// them (recovery delivers them all). Each message is taken once.
    fn take_messages(&mut self, receivers: Option<&[u64]>) -> StoreResult<Vec<NewMessage>>;

    /// Gives back messages this host took and could not deliver (their receiver does not run
    /// here), for whoever runs it to take.
    fn untake_messages(&mut self, ids: &[u64]) -> StoreResult<()>;

    /// Takes the cancels asked of workflows this host owns that it has not delivered: their
    /// numbers. Each is taken once.
    fn take_cancels(&mut self) -> StoreResult<Vec<u64>>;

    /// The unfinished workflows this host owns that are paused, by number (all of them, each
    /// look: a host learns of pauses and unpauses written by others from the difference).
    fn paused_here(&mut self) -> StoreResult<Vec<u64>>;

    /// Folds the changes to the counts by status written since the last fold into the counts
    /// (unless another connection is folding them): housekeeping, so that they stay few when
    /// nobody reads the counts.
    fn fold_counts(&mut self) -> StoreResult<()>;
}

/// What a client writes for the hosts of a store to run. Only a store hosts share takes it: the
/// one host of a SQLite file takes work from its own application.
pub trait Submit: Read {
    /// Starts `workflow` (keeping `module`'s bytes first) unless one with its id exists: its
    /// number if this started it. It waits for a host to claim it, and is numbered by the
    /// store.
    fn submit_start(
        &mut self,
        module: (&str, &[u8]),
        workflow: &NewWorkflow,
    ) -> StoreResult<Option<u64>>;

    /// Keeps a module's bytes under its hash (once: a hash the store has is left as it is).
    fn submit_module(&mut self, hash: &str, bytes: &[u8]) -> StoreResult<()>;

    /// Gives module `hash` (kept already) the next version of name `name`, unless the name's
    /// latest version is that module already (see `Op::NameModule`).
    fn submit_module_name(&mut self, name: &str, hash: &str) -> StoreResult<()>;

    /// Sends `payload` (a postcard-encoded `Payload`) to the unfinished workflow `id`, for its
    /// host to deliver: the message's number, or `None` if no such workflow runs.
    fn submit_message(&mut self, id: &str, payload: &[u8]) -> StoreResult<Option<u64>>;

    /// Asks the unfinished workflow `id` to cancel: whether it was running and not yet asked.
    fn submit_cancel(&mut self, id: &str) -> StoreResult<bool>;

    /// Pauses (`paused`) or unpauses the unfinished workflow `id`, for its owner to see:
    /// whether it was running and not already so.
    fn submit_pause(&mut self, id: &str, paused: bool) -> StoreResult<bool>;

    /// Writes a schedule op (`PutSchedule`, `DeleteSchedule`, `PauseSchedule`,
    /// `AdvanceSchedule`): whether it changed anything (a put of an id that exists, a delete or
    /// a pause of one that does not, an advance another host made first: no).
    fn submit_schedule(&mut self, op: &Op) -> StoreResult<bool>;

    /// The host numbered `id`.
    fn host_info(&mut self, id: u64) -> StoreResult<Option<HostInfo>>;

    /// The hosts that are alive or own unfinished workflows, by number.
    fn hosts(&mut self) -> StoreResult<Vec<HostRow>>;
}
