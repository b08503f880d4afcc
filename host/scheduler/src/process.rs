//! The contract between the scheduler and the processes it runs.

use wfcontract::{Command, CommandError, Event, Payload, Pid, StepOutput};

use crate::hold::Hold;
use crate::wake::{Readiness, WakerSource};

/// A state machine the scheduler can run: native Rust, or a WebAssembly instance in `wfhost`.
///
/// The scheduler calls [`init`](Process::init) once, then [`step`](Process::step) each time there
/// are new events (the first step may have none), until the step's status is final; then
/// [`close`](Process::close) exactly once. At most one thread calls into a process at a time, so
/// implementations need no internal locking.
///
/// `step` should be a pure function of the process's state and the events it is given: everything
/// else it needs (time, randomness, other processes) it asks for with a yielded command. That is
/// what lets a host journal the events and replay a process after a crash.
pub trait Process: Send + 'static {
    /// Prepares entry point `method` with `input`. An error fails the process before its first
    /// step.
    fn init(&mut self, ctx: &InitContext, method: &str, input: Payload)
        -> Result<(), ProcessError>;

    /// Advances the state machine with `events`, writing the status and any yields into `out`,
    /// which arrives reset (status `Wait`, no yields). An error fails the process.
    fn step(&mut self, events: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError>;

    /// Called before each step (with the step's events still queued): whether the process can step
    /// now. A process that needs something to run that is taken (a wasm process whose instance
    /// capacity is used up) keeps a clone of `waker`, answers [`Readiness::NotReady`], and wakes
    /// the waker once it can go on. Meanwhile the scheduler does not step it and leaves its events
    /// queued (inside the mailbox limits), whatever arrives; a termination still ends it. An error
    /// fails the process. Default: always ready.
    fn prepare(&mut self, waker: &WakerSource<'_>) -> Result<Readiness, ProcessError> {
        let _ = waker;
        Ok(Readiness::Ready)
    }

    /// Vets one of the process's own yields before it is dispatched: an `Err` completes the yield
    /// with that error instead of running it (a host's capability check: `not-allowed`, or a
    /// payload over a size limit). Called after each step, for each yield. Default: allow all.
    fn check(&self, command: &Command) -> Result<(), CommandError> {
        let _ = command;
        Ok(())
    }

    /// What a child this process spawns without naming a module runs: its own module, as the
    /// [`Spawner`](crate::Spawner) that made the process knows it (opaque to the scheduler, which
    /// hands it to the spawner with the spawn). A process finds its own module through it, never
    /// through a name that another request may unload or replace. Default: none.
    fn lineage(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        None
    }

    /// Called after each step that succeeded, with what it answered, before any of its yields is
    /// dispatched or its status acted on. A durable process hands the step to its journal here and
    /// calls [`Hold::hold`]: the scheduler then keeps the yields and the status, parks the process
    /// (as for [`Readiness::NotReady`]), and acts on them only once the [`Release`](crate::Release)
    /// it got is released (the step is on disk). The first yields it names with
    /// [`Hold::dispatch_first`] are dispatched at once instead. Default: nothing held.
    fn journal(&mut self, out: &StepOutput, hold: &Hold<'_>) {
        let _ = (out, hold);
    }

    /// Called once when the process ends, with how it ended, just before [`close`](Process::close).
    fn end(&mut self, result: &ProcessResult) {
        let _ = result;
    }

    /// Releases resources. Called exactly once, after the final step, on cancellation timeout, or
    /// at shutdown; never concurrently with `init` or `step`.
    fn close(&mut self) {}
}

/// A boxed process is one: every call goes to the process in the box (so [`Spawn::boxed`]
/// behaves as [`Spawn::new`] with the process unboxed).
///
/// [`Spawn::boxed`]: crate::Spawn::boxed
/// [`Spawn::new`]: crate::Spawn::new
impl Process for Box<dyn Process> {
    fn init(
        &mut self,
        ctx: &InitContext,
        method: &str,
        input: Payload,
    ) -> Result<(), ProcessError> {
        (**self).init(ctx, method, input)
    }

    fn step(&mut self, events: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
        (**self).step(events, out)
    }

    fn prepare(&mut self, waker: &WakerSource<'_>) -> Result<Readiness, ProcessError> {
        (**self).prepare(waker)
    }

    fn check(&self, command: &Command) -> Result<(), CommandError> {
        (**self).check(command)
    }

    fn lineage(&self) -> Option<&(dyn std::any::Any + Send + Sync)> {
        (**self).lineage()
    }

    fn journal(&mut self, out: &StepOutput, hold: &Hold<'_>) {
        (**self).journal(out, hold)
    }

    fn end(&mut self, result: &ProcessResult) {
        (**self).end(result)
    }

    fn close(&mut self) {
        (**self).close()
    }
}

/// What a process learns about itself when it starts.
#[derive(Clone, Debug)]
pub struct InitContext {
    pub(crate) pid: Pid,
    pub(crate) parent: Option<Pid>,
}

impl InitContext {
    /// A context for driving a process by hand (in tests, or in a host that is not a scheduler).
    pub fn new(pid: Pid, parent: Option<Pid>) -> InitContext {
        InitContext { pid, parent }
    }

    /// The process's own pid.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// The process that spawned it with a parent link, if any.
    pub fn parent(&self) -> Option<Pid> {
        self.parent
    }
}

/// What kind of failure ended a process, for callers that react differently to each.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// The process reported failure itself (its entry point returned an error).
    Failed,
    /// It crashed: a panic in native code, or a trap in WebAssembly (a guest panic traps too).
    Trap,
    /// It went over a limit: time, memory, yields, or the size of what it answered.
    Limit,
    /// It answered something that does not follow the contract.
    BadOutput,
    /// It could not start: its entry point does not exist. (A module the host could not
    /// instantiate fails with `Limit`, or `Trap` when its start function trapped.)
    Refused,
    /// It was ended from outside: it outlived its cancel grace period, was terminated, or the
    /// host shut down under it.
    Terminated,
    /// It was cancelled and stopped as asked (its step reported [`Status::Cancelled`]).
    ///
    /// [`Status::Cancelled`]: wfcontract::Status::Cancelled
    Cancelled,
    /// It ran past the timeout it was spawned with (`Spawn::timeout`) and was ended.
    Timeout,
    /// It could not start with its input: its `init` refused it (the input did not decode as the
    /// entry point's type, or the entry point failed to start).
    InvalidInput,
    /// Replayed from a journal, it did not do what the journal says it did.
    Nondeterminism,
}

impl FailureKind {
    /// Every kind, in declaration order.
    ///
    /// A new kind cannot be left out: `FailureKind::index` (private) matches every kind and
    /// finds each in this list at compile time, so a kind missing here does not compile.
    pub const ALL: [FailureKind; 10] = [
        FailureKind::Failed,
        FailureKind::Trap,
        FailureKind::Limit,
        FailureKind::BadOutput,
        FailureKind::Refused,
        FailureKind::Terminated,
        FailureKind::Cancelled,
        FailureKind::Timeout,
        FailureKind::InvalidInput,
        FailureKind::Nondeterminism,
    ];

    /// Its position in [`FailureKind::ALL`]. The match has no catch-all, so a new kind does not
    /// compile until it has an arm here; each arm's position is found at compile time, so the arm
    /// does not compile until `ALL` lists the kind.
    const fn index(self) -> usize {
        match self {
            FailureKind::Failed => const { FailureKind::position(FailureKind::Failed) },
            FailureKind::Trap => const { FailureKind::position(FailureKind::Trap) },
            FailureKind::Limit => const { FailureKind::position(FailureKind::Limit) },
            FailureKind::BadOutput => const { FailureKind::position(FailureKind::BadOutput) },
            FailureKind::Refused => const { FailureKind::position(FailureKind::Refused) },
            FailureKind::Terminated => const { FailureKind::position(FailureKind::Terminated) },
            FailureKind::Cancelled => const { FailureKind::position(FailureKind::Cancelled) },
            FailureKind::Timeout => const { FailureKind::position(FailureKind::Timeout) },
            FailureKind::InvalidInput => const { FailureKind::position(FailureKind::InvalidInput) },
            FailureKind::Nondeterminism => {
                const { FailureKind::position(FailureKind::Nondeterminism) }
            }
        }
    }

    /// Where `kind` first is in [`FailureKind::ALL`]; evaluated at compile time by `index`, where
    /// a kind missing from `ALL` is an error.
    const fn position(kind: FailureKind) -> usize {
        let mut i = 0;
        while i < FailureKind::ALL.len() {
            if FailureKind::ALL[i] as usize == kind as usize {
                return i;
            }
            i += 1;
        }
        panic!("a FailureKind is missing from FailureKind::ALL")
    }

    /// A short lowercase name ("trap", "limit", ...).
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Failed => "failed",
            FailureKind::Trap => "trap",
            FailureKind::Limit => "limit",
            FailureKind::BadOutput => "bad-output",
            FailureKind::Refused => "refused",
            FailureKind::Terminated => "terminated",
            FailureKind::Cancelled => "cancelled",
            FailureKind::Timeout => "timeout",
            FailureKind::InvalidInput => "invalid-input",
            FailureKind::Nondeterminism => "nondeterminism",
        }
    }

    /// The kind whose [`name`](FailureKind::name) is `name`, the inverse of `name`: for reading
    /// back a kind that was written down by name (a journal, a store). `None` for a name no kind
    /// has.
    ///
    /// ```
    /// use wfhost_scheduler::FailureKind;
    ///
    /// assert_eq!(FailureKind::from_name("trap"), Some(FailureKind::Trap));
    /// assert_eq!(FailureKind::from_name("no-such"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<FailureKind> {
        FailureKind::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
    }
}

// Every kind in `ALL` is at its own index, so `ALL` has no kind twice. (Evaluating `index` here
// also evaluates each of its arms' positions: that is what makes a kind missing from `ALL` an
// error even where nothing else calls `index`.)
const _: () = {
    let mut i = 0;
    while i < FailureKind::ALL.len() {
        assert!(
            FailureKind::ALL[i].index() == i,
            "FailureKind::ALL is out of order"
        );
        i += 1;
    }
};

/// Why a process failed: its kind, and a message saying what happened.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProcessError {
    kind: FailureKind,
    message: String,
}

impl ProcessError {
    /// A [`FailureKind::Failed`] error with this message: the process's own failure.
    pub fn new(message: impl Into<String>) -> ProcessError {
        ProcessError::with_kind(FailureKind::Failed, message)
    }

    /// An error of `kind`.
    pub fn with_kind(kind: FailureKind, message: impl Into<String>) -> ProcessError {
        ProcessError {
            kind,
            message: message.into(),
        }
    }

    /// Its kind.
    pub fn kind(&self) -> FailureKind {
        self.kind
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// How a process ended: its result payload, or why it failed.
pub type ProcessResult = Result<Payload, ProcessError>;

/// The events of one step, in delivery order. Iterating moves them out.
#[derive(Debug)]
pub struct Events<'a> {
    inner: std::vec::Drain<'a, Event>,
}

impl<'a> Events<'a> {
    /// Drains `events` (all of it, even if not fully iterated).
    pub fn new(events: &'a mut Vec<Event>) -> Events<'a> {
        Events {
            inner: events.drain(..),
        }
    }

    /// The events not yet iterated.
    pub fn as_slice(&self) -> &[Event] {
        self.inner.as_slice()
    }
}

impl Iterator for Events<'_> {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        self.inner.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl ExactSizeIterator for Events<'_> {}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::HashSet;

    use super::FailureKind;

    /// `ALL`, `index`, `name` and `from_name` agree on every kind.
    #[test]
    fn every_failure_kind_is_listed_once_and_named_distinctly() {
        let mut names = HashSet::new();
        for (i, kind) in FailureKind::ALL.into_iter().enumerate() {
            assert_eq!(kind.index(), i, "{kind:?}");
            assert_eq!(FailureKind::ALL[kind.index()], kind);
            assert_eq!(FailureKind::from_name(kind.name()), Some(kind));
            assert!(names.insert(kind.name()), "{kind:?}: a name used twice");
        }
        assert_eq!(FailureKind::from_name("no-such"), None);
        assert_eq!(FailureKind::from_name(""), None);
        assert_eq!(FailureKind::from_name("Trap"), None);
    }
}
