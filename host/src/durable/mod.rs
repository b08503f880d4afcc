//! Durability: every step of a durable workflow is journaled before its effects outside the
//! journal happen (what stays inside goes at once: `process/journal.rs`), and a host started on
//! an existing store recovers every unfinished workflow from its journal.
//!
//! This layer sits beneath the [`Host`](crate::Host) and never names it: it starts processes on
//! the host's [`Engine`](crate::engine::Engine) and hands back what it started
//! ([`Spawned`](crate::engine::Spawned)), which the host makes a [`Run`](crate::Run).
//!
//! | File | What |
//! |---|---|
//! | `store/` | The store's roles (`roles.rs`: read, journal, cluster, client), the shape both keep (`shape.rs`), SQLite and PostgreSQL behind them. |
//! | `record.rs` | What one journaled step holds. |
//! | `writer.rs` | The writer thread: group commit, then each step's effects go. |
//! | `process/` | A durable workflow: journals its steps (`journal.rs`: the record, the decisions noted on the yields, the hold); after a restart, restores its snapshot and replays the steps after it (`replay.rs`). |
//! | `snapshot.rs` | A workflow's state after a step, so that recovery need not replay what came before. |
//! | `start.rs` | Starting a workflow under an id; its result; replaying its journal with another build. |
//! | `recover.rs` | Starting every unfinished workflow of a store again (on a shared store, those this host claims). |
//! | `resolve.rs` | What recovery reads back for each workflow first, and the grants it runs with; damage, and the trees it holds. |
//! | `inbox.rs` | On a shared store, taking the messages and cancels written for this host's workflows. |
//! | `lease.rs` | A host among many on one store: its lease and the connection it claims workflows with. |
//! | `waiters.rs` | Waiting for a workflow's end or its messages to the host, fired by the writer's commits. |

pub(crate) mod inbox;
pub(crate) mod lease;
pub(crate) mod pause;
mod pending;
pub(crate) mod process;
pub mod record;
pub(crate) mod recover;
pub(crate) mod reset;
pub(crate) mod resolve;
pub(crate) mod snapshot;
pub(crate) mod start;
pub(crate) use wfhost_store as store;
pub(crate) mod upgrade;
pub(crate) mod waiters;
pub(crate) mod writer;

pub use reset::WorkflowReset;
pub use resolve::Damage;
pub use snapshot::DurableCounters;
pub use start::WorkflowResult;
pub use upgrade::Upgraded;

use std::collections::HashMap;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use wfcontract::{CommandError, ErrorKind, Payload, Pid, Tag};
use wfhost_scheduler::{FailureKind, Note, SchedulerHandle, Waker, WeakSchedulerHandle};

use crate::ids::Ids;
use crate::metrics::Metrics;
use crate::modules::Modules;
use snapshot::{Counts, Snapshots};
use start::Starting;
use store::{Cluster, Ending, HostStore, Journal};
use waiters::Waiters;
use writer::Writer;

/// The one clock of what the store keeps.
pub(crate) use wfhost_store::time::{now_millis, now_nanos};

/// Who this host is: its machine's name and its process id (`build-7:4211`).
pub(crate) fn host_name() -> String {
    format!(
        "{}:{}",
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|name| name.trim().to_string())
            .unwrap_or_else(|_| "host".into()),
        std::process::id()
    )
}

/// What a durable host shares among its workflows.
pub(crate) struct Durable {
    /// The host only reads the store ([`HostBuilder::read_store`](crate::HostBuilder::read_store)).
    read_only: bool,
    pub(crate) writer: Writer,
    /// For reads while the writer writes.
    pub(crate) reader: Mutex<Box<dyn Journal>>,
    pub(crate) ids: Arc<Ids>,
    next_message: AtomicU64,
    /// Messages refused before a restart, for the senders that had not heard yet.
    refused: Mutex<HashMap<u64, String>>,
    stopping: AtomicBool,
    /// A write failed.
    failed: AtomicBool,
    /// Weak: the scheduler holds this host's handlers, which hold the `Durable`.
    scheduler: OnceLock<WeakSchedulerHandle>,
    /// The names of the functions this host serves (set once its functions are built).
    served: OnceLock<Arc<std::collections::HashSet<String>>>,
    /// The spans of its workflows' runs and steps, when the host is traced.
    traces: OnceLock<Arc<crate::trace::Traces>>,
    modules: Arc<Modules>,
    /// While a recovery starts workflows, the wakers of those it started, which wait for it to
    /// finish before their first step (a parent's first step joins children that must exist).
    gate: Mutex<Option<Vec<Waker>>>,
    /// The paused workflows this host runs (`pause.rs`).
    pub(crate) paused: pause::Paused,
    /// The upgrades waiting for the processes of workflows that run here (`upgrade.rs`).
    pub(crate) upgrades: upgrade::Upgrades,
    /// Held while a reset runs (`reset.rs`): one at a time.
    pub(crate) resetting: Mutex<()>,
    /// When workflows save snapshots.
    pub(crate) snapshots: Snapshots,
    pub(crate) counts: Counts,
    /// On a store hosts share: this host's lease, once renewals have started.
    pub(crate) lease: OnceLock<lease::Lease>,
    /// On a store hosts share: joins of workflows another host runs, completed when the store
    /// says they ended (looked at each time the host claims).
    pub(crate) remote_joins: Mutex<Vec<(Pid, wfhost_scheduler::Completer)>>,
    /// On a store hosts share: this host's number, and the connections its lease will use.
    joined: Mutex<Option<Joined>>,
    /// What recoveries found damaged and left as it was.
    pub(crate) damaged: Mutex<Vec<resolve::Damage>>,
    /// Workflows left for a host that loads their module, already warned about.
    pub(crate) waiting_warned: Mutex<std::collections::HashSet<u64>>,
    /// Held by whoever claims workflows or takes messages and cancels from a shared store, so
    /// that what one takes the other does not take again.
    pub(crate) taking: Mutex<()>,
    /// On a shared store, the top-level workflows whose start is being written and spawned
    /// here (see `start.rs`): what clients write for them waits for them to run.
    pub(crate) starting: Mutex<Starting>,
    /// Those waiting for workflows to end or to send the host a message.
    pub(crate) waiters: Arc<Waiters>,
    /// What the host counts, when it is scraped.
    pub(crate) metrics: Option<Metrics>,
    /// Where the store is.
    pub(crate) location: store::Location,
    /// Who this host is: its machine's name and its process id.
    pub(crate) host_name: String,
}

/// A host that joined a shared store, before its lease renewals start.
struct Joined {
    host: u64,
    length: std::time::Duration,
    renewer: Box<dyn Cluster>,
    store: Box<dyn Cluster>,
}

impl Durable {
    /// The durable side of a host on `store`: one that hosts it (`lease`: how long its lease
    /// lasts on a store hosts share), or, with no lease, one that only reads it
    /// ([`HostBuilder::read_store`](crate::HostBuilder::read_store)).
    pub(crate) fn open(
        store: HostStore,
        ids: Arc<Ids>,
        modules: Arc<Modules>,
        snapshots: Snapshots,
        lease: Option<std::time::Duration>,
        metrics: Option<Metrics>,
        location: &store::Location,
    ) -> crate::Result<Durable> {
        let mut durable = Durable::open_store(store, ids, modules, snapshots, lease, metrics)?;
        durable.location = location.clone();
        Ok(durable)
    }

    fn open_store(
        store: HostStore,
        ids: Arc<Ids>,
        modules: Arc<Modules>,
        snapshots: Snapshots,
        lease: Option<std::time::Duration>,
        metrics: Option<Metrics>,
    ) -> crate::Result<Durable> {
        let HostStore {
            journal: mut store,
            cluster,
        } = store;
        let Some(lease) = lease else {
            let reader = store.reader().map_err(store_error)?;
            let (_, messages) = store.high_water().map_err(store_error)?;
            let durable = Durable::new(
                store, reader, ids, modules, snapshots, messages, None, metrics,
            )?;
            durable.writer.fail(&store::StoreError::new(
                store::StoreErrorKind::Invalid,
                "this host only reads the store (HostBuilder::read_store): start, recover and \
                 claim workflows on a host that holds it",
            ));
            return Ok(Durable {
                read_only: true,
                ..durable
            });
        };
        let name = host_name();
        // On a shared store, the host joins before its writer writes anything.
        let joined = match cluster {
            Some(mut cluster) => Some(Joined {
                host: cluster.join(lease, &name).map_err(store_error)?,
                length: lease,
                renewer: cluster.connection().map_err(store_error)?,
                store: cluster,
            }),
            None => None,
        };
        // The steps a host appended before it stopped are moved into place before a recovery
        // reads them.
        if let Err(error) = store.tidy(true) {
            // Reads take the log as well; a full store (or one capped) still opens.
            tracing::warn!("{error}; the steps stay in the log for now");
        }
        let mut reader = store.reader().map_err(store_error)?;
        let (_, messages) = reader.high_water().map_err(store_error)?;
        Durable::new(
            store, reader, ids, modules, snapshots, messages, joined, metrics,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn new(
        store: Box<dyn Journal>,
        reader: Box<dyn Journal>,
        ids: Arc<Ids>,
        modules: Arc<Modules>,
        snapshots: Snapshots,
        messages: u64,
        joined: Option<Joined>,
        metrics: Option<Metrics>,
    ) -> crate::Result<Durable> {
        let waiters = Arc::new(Waiters::default());
        let hooks = writer::Hooks {
            waiters: Arc::clone(&waiters),
            metrics: metrics.clone(),
        };
        let writer = Writer::start(store, hooks).map_err(|e| {
            crate::Error::new(
                crate::ErrorKind::Store,
                format!("could not start the journal's writer thread: {e}"),
            )
        })?;
        Ok(Durable {
            read_only: false,
            writer,
            reader: Mutex::new(reader),
            ids,
            next_message: AtomicU64::new(messages + 1),
            refused: Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            scheduler: OnceLock::new(),
            served: OnceLock::new(),
            traces: OnceLock::new(),
            modules,
            gate: Mutex::new(None),
            paused: pause::Paused::default(),
            upgrades: upgrade::Upgrades::default(),
            resetting: Mutex::new(()),
            snapshots,
            counts: Counts::default(),
            lease: OnceLock::new(),
            remote_joins: Mutex::new(Vec::new()),
            joined: Mutex::new(joined),
            damaged: Mutex::new(Vec::new()),
            waiting_warned: Mutex::new(std::collections::HashSet::new()),
            taking: Mutex::new(()),
            starting: Mutex::default(),
            waiters,
            metrics,
            location: store::Location::Sqlite(std::path::PathBuf::new()),
            host_name: host_name(),
        })
    }

    /// Starts renewing the lease of a host that joined a shared store (once it is in an `Arc`).
    pub(crate) fn start_lease(self: &Arc<Durable>) -> crate::Result<()> {
        let Some(joined) = self.joined.lock().take() else {
            return Ok(());
        };
        let lease = lease::Lease::start(
            joined.host,
            joined.length,
            joined.renewer,
            joined.store,
            Arc::downgrade(self),
        )
        .map_err(|e| {
            crate::Error::new(
                crate::ErrorKind::Store,
                format!("could not start the lease's thread: {e}"),
            )
        })?;
        let _ = self.lease.set(lease);
        Ok(())
    }

    /// Whether hosts share the store (each owns some workflows).
    pub(crate) fn shared(&self) -> bool {
        self.lease.get().is_some()
    }

    /// Completes the joins of workflows other hosts ran that have ended since.
    pub(crate) fn complete_remote_joins(&self) {
        let waiting = std::mem::take(&mut *self.remote_joins.lock());
        let mut still = Vec::new();
        for (target, completer) in waiting {
            match self.ended(target) {
                Some(result) => completer.complete(result),
                None => still.push((target, completer)),
            }
        }
        self.remote_joins.lock().extend(still);
    }

    /// Whether `pid` is an unfinished workflow of a shared store that does not run here: a
    /// message to it is journaled, and its owner takes it from the store.
    ///
    /// Asked on the step path for every send that is not to a durable workflow here: the host
    /// and processes of this host are answered without the store.
    pub(crate) fn runs_elsewhere(&self, pid: Pid) -> bool {
        self.shared()
            && pid != Pid::HOST
            && !self.ids.contains(pid)
            && !self.scheduler().is_some_and(|s| s.exists(pid))
            && self
                .reader
                .lock()
                .workflow_by_num(pid.0)
                .is_ok_and(|w| w.is_some_and(|w| w.state == store::State::Running))
    }

    /// Sets the scheduler the host runs on (once, when it is built).
    pub(crate) fn set_scheduler(&self, scheduler: &SchedulerHandle) {
        let _ = self.scheduler.set(scheduler.downgrade());
    }

    /// The scheduler, while it exists.
    pub(crate) fn scheduler(&self) -> Option<SchedulerHandle> {
        self.scheduler.get().and_then(WeakSchedulerHandle::upgrade)
    }

    /// The functions this host serves (see `Functions::wait_for_a_host`).
    pub(crate) fn set_served(&self, served: Arc<std::collections::HashSet<String>>) {
        let _ = self.served.set(served);
    }

    /// Traces its workflows with `traces`.
    pub(crate) fn set_traces(&self, traces: Arc<crate::trace::Traces>) {
        let _ = self.traces.set(traces);
    }

    /// The host's traces, if it is traced.
    pub(crate) fn traces(&self) -> Option<&Arc<crate::trace::Traces>> {
        self.traces.get()
    }

    /// Whether this host serves function `name`: a durable workflow's call to one it does not
    /// waits for a host that does, rather than being refused.
    pub(crate) fn serves(&self, name: &str) -> bool {
        self.served.get().is_none_or(|served| served.contains(name))
    }

    /// Holds back the first step of recovered workflows until [`open_gate`](Self::open_gate).
    pub(crate) fn close_gate(&self) {
        self.gate.lock().get_or_insert_with(Vec::new);
    }

    /// Lets the recovered workflows held back go on.
    pub(crate) fn open_gate(&self) {
        let wakers = self.gate.lock().take().unwrap_or_default();
        for waker in wakers {
            waker.wake();
        }
    }

    /// Wakes `waker` when the gate opens (at once if it is open): a recovered workflow spawned
    /// held.
    pub(crate) fn hold_at_gate(&self, waker: Waker) {
        let mut gate = self.gate.lock();
        match gate.as_mut() {
            Some(wakers) => wakers.push(waker),
            None => {
                drop(gate);
                waker.wake();
            }
        }
    }

    /// Whether a recovered workflow must wait for the recovery to finish; if so, `waker` wakes
    /// it then.
    pub(crate) fn held_at_gate(&self, waker: impl FnOnce() -> Waker) -> bool {
        match self.gate.lock().as_mut() {
            Some(wakers) => {
                wakers.push(waker());
                true
            }
            None => false,
        }
    }

    pub(crate) fn next_message(&self) -> u64 {
        self.next_message.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// From now on, what ends is the host stopping, not the workflows: nothing more is journaled
    /// as an end.
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    /// A write failed, with the held steps of `lost`: every durable workflow stops where its
    /// journal ends, its end not journaled (a host started on a working store resumes it), and
    /// whoever waits for it hears why. Those in `lost`, and any that started since the first
    /// failure, stop too.
    pub(crate) fn store_failed(&self, error: &store::StoreError, lost: &[Pid]) {
        let first = !self.failed.swap(true, Ordering::AcqRel);
        self.stop();
        let Some(scheduler) = self.scheduler() else {
            return;
        };
        let reason = format!(
            "{}; the workflow stops where its journal ends and resumes when a host is started \
             on the store again",
            error.message()
        );
        let everyone: Vec<Pid> = if first { self.ids.pids() } else { Vec::new() };
        for pid in everyone.iter().chain(lost) {
            let _ = scheduler.terminate(*pid, reason.clone());
        }
    }

    /// The hash of the module loaded as `name`.
    pub(crate) fn module_hash(&self, name: &str) -> Option<String> {
        self.modules
            .get(name)
            .ok()
            .map(|loaded| loaded.compiled.info.sha256.clone())
    }

    /// Remembers the messages refused before a restart.
    pub(crate) fn set_refused(&self, refused: HashMap<u64, String>) {
        *self.refused.lock() = refused;
    }

    /// Why message `number` was refused, if it was (before a restart).
    pub(crate) fn refusal(&self, number: u64) -> Option<CommandError> {
        self.refused
            .lock()
            .get(&number)
            .map(|why| CommandError::new(ErrorKind::MailboxFull, why.clone()))
    }

    /// Why the start of `child` was refused, if it was.
    pub(crate) fn refused_child(&self, child: Pid) -> Option<CommandError> {
        let workflow = self.reader.lock().workflow_by_num(child.0).ok()??;
        match workflow.ending {
            Some(Ending::Failed { kind, message }) if kind == FailureKind::Refused.name() => {
                Some(CommandError::new(ErrorKind::InvalidInput, message))
            }
            _ => None,
        }
    }

    /// The result of workflow `target` if it has ended, as a join sees it.
    pub(crate) fn ended(&self, target: Pid) -> Option<Result<Payload, CommandError>> {
        self.ended_for(target, None)
    }

    /// As [`ended`](Self::ended), for a join by `caller` that may join only its own children
    /// when `confined`: another's ended workflow is, to it, no process at all.
    fn ended_for(
        &self,
        target: Pid,
        confined: Option<Pid>,
    ) -> Option<Result<Payload, CommandError>> {
        let workflow = self.reader.lock().workflow_by_num(target.0).ok()??;
        if let Some(caller) = confined {
            if workflow.start.parent != Some(caller.0) {
                return None;
            }
        }
        match workflow.ending? {
            Ending::Done(bytes) => Some(
                postcard::from_bytes(&bytes)
                    .map_err(|e| CommandError::new(ErrorKind::Failed, e.to_string())),
            ),
            Ending::Failed { kind, message } => {
                let stopped = [FailureKind::Cancelled, FailureKind::Terminated];
                let kind = if stopped.iter().any(|k| kind == k.name()) {
                    ErrorKind::ChildCancelled
                } else {
                    ErrorKind::ChildFailed
                };
                Some(Err(CommandError::new(
                    kind,
                    format!("process {target} ended: {message}"),
                )))
            }
        }
    }
}

impl Durable {
    /// Writes `ops` and waits until they are on disk.
    pub(crate) fn write(&self, ops: Vec<store::Op>) -> crate::Result<()> {
        self.writer.write(ops).map(drop).map_err(store_error)
    }

    /// Refuses new work once the store has failed.
    pub(crate) fn writable(&self) -> crate::Result<()> {
        match self.writer.failed() {
            Some(error) => Err(store_error(error)),
            None => Ok(()),
        }
    }

    /// Keeps a cancel of durable workflow `pid` in the store before it is delivered: a restart
    /// delivers it again if no step took it.
    pub(crate) fn keep_cancel(&self, pid: Pid) -> crate::Result<()> {
        self.write(vec![store::Op::Cancel { num: pid.0 }])
    }

    /// Keeps a module's bytes in the store (or, when it has them, the time they were last
    /// stored, which a prune keeps them past). Written every time: a prune (this host's or
    /// another's) may have removed them since.
    pub(crate) fn keep_module(&self, hash: &str, bytes: &[u8]) -> crate::Result<()> {
        if self.read_only {
            return Ok(());
        }
        self.write(vec![store::Op::Module {
            hash: hash.to_string(),
            bytes: Arc::from(bytes),
        }])
    }

    /// Module `hash` (kept already) takes the next version of name `name`, unless the name's
    /// latest version is that module: through the journal on a store of this host's own, in a
    /// transaction of its own (`client`'s) on a store hosts share.
    pub(crate) fn name_module(
        &self,
        client: &crate::client::StoreClient,
        name: &str,
        hash: &str,
    ) -> crate::Result<()> {
        if self.lease.get().is_some() {
            return client.submit(true, |store| store.submit_module_name(name, hash));
        }
        self.write(vec![store::Op::NameModule {
            name: name.to_string(),
            hash: hash.to_string(),
            at: now_millis(),
        }])
    }

    /// A message from the host to durable workflow `to`: on disk before it is delivered, so a
    /// restart delivers it if no step took it.
    pub(crate) fn send_from_host(
        &self,
        scheduler: &SchedulerHandle,
        to: Pid,
        message: Payload,
    ) -> crate::Result<u64> {
        let number = self.next_message();
        let payload = postcard::to_allocvec(&message).map_err(|e| {
            crate::Error::new(crate::ErrorKind::InvalidInput, format!("the message: {e}"))
        })?;
        self.write(vec![store::Op::Message(store::NewMessage {
            id: number,
            receiver: to.0,
            sender: 0,
            payload,
            local: true,
        })])?;
        scheduler
            .send_numbered(Pid::HOST, to, number, message)
            .map_err(|refused| {
                let error = crate::Error::refused(refused);
                self.refuse(number, error.message());
                error
            })?;
        Ok(number)
    }

    /// A message from the host to the unfinished durable workflow `num`, which does not run
    /// here: kept in the store for whoever runs it (a recovery delivers it): its number.
    pub(crate) fn keep_message(&self, num: u64, message: &Payload) -> crate::Result<u64> {
        let number = self.next_message();
        let payload = postcard::to_allocvec(message).map_err(|e| {
            crate::Error::new(crate::ErrorKind::InvalidInput, format!("the message: {e}"))
        })?;
        self.write(vec![store::Op::Message(store::NewMessage {
            id: number,
            receiver: num,
            sender: 0,
            payload,
            local: false,
        })])?;
        Ok(number)
    }

    /// Marks message `number` refused (before anyone hears so).
    pub(crate) fn refuse(&self, number: u64, why: &str) {
        let entry = writer::Submission {
            ops: vec![store::Op::Refused {
                id: number,
                error: why.to_string(),
            }],
            done: writer::Done::Nothing,
        };
        if let Err(error) = self.writer.submit(entry) {
            tracing::error!("a refused message could not be journaled: {error}");
        }
    }
}

pub(crate) fn store_error(error: store::StoreError) -> crate::Error {
    crate::Error::from(error)
}

/// `join` in a durable host: a workflow that ended before a restart is not in the scheduler, and
/// its result comes from the store.
pub(crate) struct DurableJoin(pub(crate) Arc<Durable>);

impl wfhost_scheduler::Handler for DurableJoin {
    fn handle(&self, request: wfhost_scheduler::Request, cx: &wfhost_scheduler::Context<'_>) {
        if let wfcontract::Command::Join(target) = request.command {
            if !cx.scheduler().exists(target) && self.0.ids.get(target).is_none() {
                let confined = cx.confined().then(|| cx.pid());
                if let Some(result) = self.0.ended_for(target, confined) {
                    return cx.complete(request.tag, result);
                }
                // On a shared store, a workflow another host runs: answered when it ends.
                if confined.is_none() && self.0.runs_elsewhere(target) {
                    let completer = cx.completer(request.tag);
                    self.0.remote_joins.lock().push((target, completer));
                    return;
                }
            }
        }
        wfhost_scheduler::join_handler(request, cx)
    }
}

/// `log` in a durable host: a durable workflow's records name its workflow id beside its pid.
pub(crate) struct DurableLog(pub(crate) Arc<Durable>);

impl wfhost_scheduler::Handler for DurableLog {
    fn handle(&self, request: wfhost_scheduler::Request, cx: &wfhost_scheduler::Context<'_>) {
        if let wfcontract::Command::Log(record) = &request.command {
            let id = self.0.ids.get(cx.pid());
            wfhost_scheduler::emit_guest_log(cx.pid(), id.as_deref(), record);
        }
    }
}

/// `send` in a durable host: a message a durable step journaled goes out under its number (the
/// receiver's journal records it when taken); a refusal is journaled before the sender hears.
pub(crate) struct DurableSend(pub(crate) Arc<Durable>);

impl wfhost_scheduler::Handler for DurableSend {
    fn handle(&self, request: wfhost_scheduler::Request, cx: &wfhost_scheduler::Context<'_>) {
        if let wfcontract::Command::Send(send) = &request.command {
            if send.to == Pid::HOST && self.0.ids.contains(cx.pid()) {
                let message = send.message.clone();
                let again = request.note.as_deref() == Some(&Note::Again);
                return self.0.send_to_host(request.tag, message, again, cx);
            }
        }
        // A message the sender's step journaled goes out under the number it was written with.
        let (Some(Note::Numbered(number)), wfcontract::Command::Send(send)) =
            (request.note.as_deref(), &request.command)
        else {
            return wfhost_scheduler::send_handler(request, cx);
        };
        let number = *number;
        let mut result = cx.send_numbered(send.to, number, send.message.clone());
        if let Err(wfhost_scheduler::Error::NoSuchProcess(_)) = &result {
            // On a shared store, a workflow another host runs takes it from the store.
            if self.0.runs_elsewhere(send.to) {
                result = Ok(());
            }
        }
        if let Err(refused) = &result {
            self.0.refuse(number, &refused.to_string());
        }
        cx.complete(
            request.tag,
            result
                .map(|()| Payload::empty())
                .map_err(wfhost_scheduler::Error::into_command_error),
        );
    }
}

impl Durable {
    /// Whether the store keeps the message to the host that `pid` sent with tag `tag`.
    fn kept_already(&self, pid: Pid, tag: Tag) -> bool {
        match self
            .reader
            .lock()
            .host_messages(pid.0, tag.0.saturating_sub(1), 1)
        {
            Ok(kept) => kept.first().is_some_and(|m| m.tag == tag.0),
            // Sent again rather than lost.
            Err(_) => false,
        }
    }

    /// A durable workflow's message to the host (its send with tag `tag`): kept in the store
    /// for whoever asks, whether or not anyone reads it now, and handed to the application that
    /// started the workflow when it reads them ([`Run::recv_message`](crate::Run::recv_message));
    /// with no reader, it is logged. Only a reader that is not keeping up refuses it
    /// (`mailbox-full`, as for a process that is not durable).
    fn send_to_host(
        &self,
        tag: Tag,
        message: Payload,
        again: bool,
        cx: &wfhost_scheduler::Context<'_>,
    ) {
        use wfhost_scheduler::HostOffer;
        let pid = cx.pid();
        let kept = store::HostMessage {
            num: pid.0,
            tag: tag.0,
            at: now_millis(),
            payload: postcard::to_allocvec(&message).unwrap_or_default(),
        };
        if again && self.kept_already(pid, tag) {
            // Sent before the restart, and kept: whoever read it then has it.
            return cx.complete(tag, Ok(Payload::empty()));
        }
        let offered = wfhost_scheduler::offer_to_host(cx, message.clone());
        if offered == HostOffer::Full {
            // Refused as any process's message is: the reader is not keeping up.
            return cx.complete(tag, offered.into_result().map(|()| Payload::empty()));
        }
        if offered == HostOffer::NoReader {
            let id = self.ids.get(pid);
            // Logged in full up to a few KiB; the store keeps all of it.
            let shown = crate::observe::shown(&message);
            tracing::info!(
                target: "wfhost::guest",
                pid = pid.0,
                workflow = id.as_deref().unwrap_or(""),
                "message to the host: {shown}"
            );
        }
        // Queued behind the step that sent it: a restart after that step and before this is on
        // disk sends it again (its completion was not journaled), and the store keeps it once.
        let entry = writer::Submission {
            ops: vec![store::Op::HostMessage(kept)],
            done: writer::Done::Nothing,
        };
        let result = match self.writer.submit(entry) {
            Ok(()) => Ok(Payload::empty()),
            Err(error) => Err(CommandError::new(ErrorKind::Unavailable, error.message())),
        };
        cx.complete(tag, result);
    }
}

/// A board in memory keeps workers' outcomes of durable workflows' calls in the store, from the
/// completion's answer until the step that takes each is journaled (`Op::TaskOutcome`).
impl crate::tasks::Outcomes for Durable {
    fn keep(
        &self,
        (num, tag): (u64, u64),
        outcome: &Result<Payload, wfcontract::CommandError>,
    ) -> Result<(), String> {
        let outcome = postcard::to_allocvec(outcome).map_err(|e| e.to_string())?;
        self.write(vec![store::Op::TaskOutcome { num, tag, outcome }])
            .map_err(|e| e.message().to_string())
    }

    fn kept(&self, (num, tag): (u64, u64)) -> Option<Result<Payload, wfcontract::CommandError>> {
        let bytes = self.reader.lock().task_outcome(num, tag).ok()??;
        postcard::from_bytes(&bytes).ok()
    }
}
