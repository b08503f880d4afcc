//! Command handling, in one place: after a step, each yield goes to the handler registered for its
//! kind. Every scheduler handles `sleep`, `sleep-until`, `forget`, `now`, `random` (`time.rs`),
//! `send`, `log` (`messages.rs`), `join` and `cancel` (`processes.rs`), and `spawn` when given a
//! [`Spawner`] (what a host knows of its modules); a host adds `call` for the functions its
//! embedder registers. A command with no handler completes with `unknown-command`.
//!
//! Handlers run on the worker thread, right after the step, so they must not block: a handler
//! either answers at once ([`Context::complete`]) or hands the work to another thread (a timer, a
//! pool, an async runtime) together with a [`Completer`], which finishes the yield later from
//! anywhere.

mod messages;
mod processes;
mod time;

pub use messages::send as send_handler;
pub use messages::{emit, offer_to_host, HostOffer};
pub use processes::join as join_handler;
pub(crate) use processes::SpawnHandler;
pub use processes::Spawner;

use std::sync::Arc;

use wfcontract::{Command, CommandError, CommandKind, ErrorKind, Event, Payload, Pid, Tag};

use crate::error::Error;
use crate::handle::SchedulerHandle;
use crate::slot::Slot;
use crate::spawn::Spawn;

/// One yielded command, addressed to a handler.
#[derive(Debug)]
pub struct Request {
    /// The process that yielded it.
    pub pid: Pid,
    /// The tag to complete.
    pub tag: Tag,
    /// What it asks for.
    pub command: Command,
    /// What the process's journal decided about it, if anything (see
    /// [`Hold::note`](crate::Hold::note)). Boxed: most yields have none, and a request stays
    /// small on the step path.
    pub note: Option<Box<crate::hold::Note>>,
}

/// Carries out one kind of command. See the module docs for the threading rules.
pub trait Handler: Send + Sync + 'static {
    /// Starts (and possibly finishes) the command. A panic here fails the requesting process.
    fn handle(&self, request: Request, cx: &Context<'_>);

    /// Called once at scheduler shutdown, after the workers have stopped: stop threads, drop
    /// pending work.
    fn shutdown(&self) {}

    /// Process `pid` ended (or stopped on this scheduler): drop what this handler still runs for
    /// it. Called only for a process this handler asked to hear of ([`Context::watch_end`]),
    /// once, by the thread that ends it; only for the handlers of `call` and `retry`.
    fn ended(&self, pid: Pid) {
        let _ = pid;
    }

    /// Process `pid` forgot the command it yielded with `tag` (it waits for its completion no
    /// more): drop what this handler runs for it. As [`ended`](Self::ended), for a process that
    /// asked, and for the handlers of `call` and `retry`.
    fn forgot(&self, pid: Pid, tag: Tag) {
        let _ = (pid, tag);
    }
}

impl<F> Handler for F
where
    F: Fn(Request, &Context<'_>) + Send + Sync + 'static,
{
    fn handle(&self, request: Request, cx: &Context<'_>) {
        self(request, cx)
    }
}

/// What a handler can do while it handles a request.
pub struct Context<'a> {
    pub(crate) handle: &'a SchedulerHandle,
    pub(crate) slot: &'a Arc<Slot>,
    /// The requesting process, between its step and its next (its yields are dispatched while
    /// the worker holds it).
    pub(crate) process: &'a dyn crate::Process,
    /// The completions given inline ([`Context::complete`]): the process body's own lane, which
    /// its next step takes without a trip through the inbox's lock (see `Body::completed`).
    pub(crate) inline: &'a std::cell::RefCell<crate::inbox::Inline>,
    /// The worker's cache of the processes its processes send to (`targets.rs`).
    pub(crate) targets: &'a std::cell::RefCell<crate::targets::Targets>,
}

impl std::fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("pid", &self.slot.pid)
            .finish_non_exhaustive()
    }
}

impl Context<'_> {
    /// The scheduler, to send, spawn, cancel or complete other yields.
    pub fn scheduler(&self) -> &SchedulerHandle {
        self.handle
    }

    /// The requesting process.
    pub fn pid(&self) -> Pid {
        self.slot.pid
    }

    /// Whether the requesting process may act only on its own children.
    pub fn confined(&self) -> bool {
        self.slot.confined
    }

    /// Asks that the handlers of `call` and `retry` hear when the requesting process ends, and
    /// when it forgets a command ([`Handler::ended`], [`Handler::forgot`]). A process that never
    /// asks costs its end nothing.
    pub fn watch_end(&self) {
        self.slot
            .watched
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Completes yield `tag` of the requesting process now.
    pub fn complete(&self, tag: Tag, result: Result<Payload, CommandError>) {
        // The process is `Running` on this very worker, which takes these after dispatching the
        // yields: no wake-up is needed, only the event.
        self.inline
            .borrow_mut()
            .push(Event::completion(tag, result));
    }

    /// Sends `message` from the requesting process to `to`, as
    /// [`SchedulerHandle::send_numbered`] does (`number` is the message's tag: zero, or a durable
    /// host's number for it), finding `to` through the worker's cache of recent receivers first.
    pub fn send_numbered(&self, to: Pid, number: u64, message: Payload) -> Result<(), Error> {
        let mut event = Event::message(self.slot.pid, message);
        event.tag = Tag(number);
        let shared = &self.handle.shared;
        let mut targets = self.targets.borrow_mut();
        let event = match targets.get(to) {
            Some(slot) => match shared.deliver_or_return(slot, event) {
                Ok(delivered) => return delivered.map_err(|refused| refused.into_send_error(to)),
                // Its process ended: the pid may have another slot now.
                Err(event) => {
                    targets.forget(to);
                    event
                }
            },
            None => event,
        };
        let slot = shared.slot(to).ok_or(Error::NoSuchProcess(to))?;
        shared
            .deliver(&slot, event)
            .map_err(|refused| refused.into_send_error(to))?;
        targets.insert(slot);
        Ok(())
    }

    /// Spawns a child of the requesting process: as [`SchedulerHandle::spawn_with`] with
    /// [`Spawn::parent`] set to it, without looking the parent up.
    pub fn spawn_child(&self, spawn: Spawn) -> Result<Pid, Error> {
        let spawn = spawn.parent(self.slot.pid);
        self.handle.shared.spawn(spawn, Some(self.slot))
    }

    /// A handle that completes yield `tag` of the requesting process later, from any thread.
    pub fn completer(&self, tag: Tag) -> Completer {
        Completer {
            handle: self.handle.clone(),
            slot: Arc::clone(self.slot),
            tag,
        }
    }
}

/// Completes one yield, once, from any thread. Dropping it without completing leaves the process
/// waiting (until it is cancelled).
#[derive(Debug)]
#[must_use = "a yield that is never completed leaves its process waiting"]
pub struct Completer {
    handle: SchedulerHandle,
    slot: Arc<Slot>,
    tag: Tag,
}

impl Completer {
    /// The process waiting for this completion.
    pub fn pid(&self) -> Pid {
        self.slot.pid
    }

    /// The tag being completed.
    pub fn tag(&self) -> Tag {
        self.tag
    }

    /// Delivers the result. If the process has finished meanwhile, the result is dropped.
    pub fn complete(self, result: Result<Payload, CommandError>) {
        self.handle
            .shared
            .complete_slot(&self.slot, self.tag, result);
    }
}

/// The handler table, indexed by [`CommandKind::index`].
pub(crate) struct Handlers {
    table: [Option<Arc<dyn Handler>>; CommandKind::ALL.len()],
}

impl Handlers {
    /// A table with the built-in handlers.
    pub(crate) fn builtin() -> Handlers {
        let mut handlers = Handlers {
            table: Default::default(),
        };
        handlers.set(CommandKind::Sleep, Arc::new(time::sleep));
        handlers.set(CommandKind::SleepUntil, Arc::new(time::sleep));
        handlers.set(CommandKind::Forget, Arc::new(time::forget));
        handlers.set(CommandKind::Now, Arc::new(time::now));
        handlers.set(CommandKind::Random, Arc::new(time::random));
        handlers.set(CommandKind::Log, Arc::new(messages::log));
        handlers.set(CommandKind::Send, Arc::new(messages::send));
        handlers.set(CommandKind::Cancel, Arc::new(processes::cancel));
        handlers.set(CommandKind::Join, Arc::new(processes::join));
        handlers
    }

    pub(crate) fn set(&mut self, kind: CommandKind, handler: Arc<dyn Handler>) {
        debug_assert!(kind.index() < self.table.len());
        self.table[kind.index()] = Some(handler);
    }

    pub(crate) fn get(&self, kind: CommandKind) -> Option<&Arc<dyn Handler>> {
        self.table[kind.index()].as_ref()
    }

    /// The handlers of `call` and `retry` (once each, if one handles both): those told of a
    /// watched process's end and of its forgotten commands.
    pub(crate) fn watchers(&self) -> Vec<Arc<dyn Handler>> {
        let mut watchers: Vec<Arc<dyn Handler>> = Vec::new();
        for kind in [CommandKind::Call, CommandKind::Retry] {
            if let Some(handler) = self.get(kind) {
                if !watchers.iter().any(|w| Arc::ptr_eq(w, handler)) {
                    watchers.push(Arc::clone(handler));
                }
            }
        }
        watchers
    }

    pub(crate) fn registered(&self) -> impl Iterator<Item = CommandKind> + '_ {
        CommandKind::ALL
            .into_iter()
            .filter(|kind| self.table[kind.index()].is_some())
    }

    pub(crate) fn shutdown_all(&self) {
        for handler in self.table.iter().flatten() {
            handler.shutdown();
        }
    }
}

/// The error a process sees for a command this scheduler has no handler for.
pub(crate) fn unknown_command(kind: CommandKind) -> CommandError {
    CommandError::new(
        ErrorKind::UnknownCommand,
        format!("this host has no handler for command '{}'", kind.name()),
    )
}
