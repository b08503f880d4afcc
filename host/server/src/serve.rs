//! [`Server`]: a host that serves a store until stopped, as `wfhost serve` does, for an
//! application that registers host functions of its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::http::Api;
use wfhost::Client;
use wfhost::Grants;
use wfhost::Host;
use wfhost::Result;

mod retention;
mod schedules;

/// How often a [`Server`] looks for work unless told otherwise ([`Server::poll`]).
pub const DEFAULT_POLL: Duration = Duration::from_millis(250);

/// The most trees a [`Server`] claims at one look unless told otherwise ([`Server::claim`]).
pub const DEFAULT_CLAIM: usize = 1_000;

/// How long a [`Server`] lets running steps finish when it stops unless told otherwise
/// ([`Server::grace`]).
pub const DEFAULT_SERVE_GRACE: Duration = Duration::from_secs(5);

/// Serves a store with hosts an application builds: on a store hosts share (PostgreSQL) it
/// claims the workflows no live host owns (new ones from clients, and those of a host whose
/// lease ran out), again and again, and runs them; on a SQLite file it is the one host and runs
/// every unfinished workflow. Clients' starts, messages and cancels wake it at once; a poll
/// catches the rest. It claims only while its host has room for more processes.
///
/// A host that loses its lease (it was paused, or cut off from the store) stops its workflows;
/// the server builds a new host, with a new lease, and goes on. [`Stopper::stop`] (from a signal
/// handler, another thread) stops it: it claims nothing more, lets running steps finish within
/// the grace period, and gives what the host ran back to the other hosts.
///
/// ```no_run
/// let server = wfhost_server::Server::new();
/// let stopper = server.stopper();
/// // ... install a signal handler that calls stopper.stop() ...
/// server.run(|| {
///     let host = wfhost::Host::builder()
///         .store("postgres://wfhost@db/wf", wfhost::SyncMode::Full)
///         .build()?;
///     host.load_module("orders", "orders.wasm")?;
///     Ok(host)
/// })?;
/// # Ok::<(), wfhost::Error>(())
/// ```
#[derive(Debug)]
pub struct Server {
    poll: Duration,
    claim: usize,
    grace: Duration,
    grants: Option<Grants>,
    api: Option<Api>,
    retain: Option<Duration>,
    stop: Arc<AtomicBool>,
    wake: (Sender<()>, Receiver<()>),
}

/// Stops a [`Server`] from anywhere: a signal handler, another thread. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Stopper {
    stop: Arc<AtomicBool>,
    wake: Sender<()>,
}

impl Stopper {
    /// Asks the server to stop: [`Server::run`] returns once its host has stopped.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.wake.try_send(());
    }
}

impl Default for Server {
    fn default() -> Server {
        Server::new()
    }
}

impl Server {
    /// A server with the defaults: a poll every 250 ms, up to 1,000 trees claimed at a look, 5
    /// seconds' grace, and workflows whose module is not loaded left for a host that has it.
    pub fn new() -> Server {
        Server {
            poll: DEFAULT_POLL,
            claim: DEFAULT_CLAIM,
            grace: DEFAULT_SERVE_GRACE,
            grants: None,
            api: None,
            retain: None,
            stop: Arc::new(AtomicBool::new(false)),
            wake: crossbeam_channel::bounded(1),
        }
    }

    /// How often to look for work that did not wake the server (messages from workflows on
    /// other hosts, leases that ran out).
    pub fn poll(mut self, poll: Duration) -> Server {
        self.poll = poll;
        self
    }

    /// The most trees of workflows (a top-level workflow and what it spawned) claimed at one
    /// look, so that hosts starting together share the work (at least 1).
    pub fn claim(mut self, trees: usize) -> Server {
        self.claim = trees.max(1);
        self
    }

    /// How long running steps may take to finish when the server stops.
    pub fn grace(mut self, grace: Duration) -> Server {
        self.grace = grace;
        self
    }

    /// Runs the workflows whose module bytes the host does not load from the bytes the store
    /// kept, under `grants` (see [`Host::recover_with`]). Without this, they wait for a host that
    /// loads their module (see [`Host::recover`]).
    pub fn grants(mut self, grants: Grants) -> Server {
        self.grants = Some(grants);
        self
    }

    /// Keeps finished workflows for `age` after they finished, then removes them with their
    /// trees and everything of theirs ([`Client::prune`]): every tenth of `age` (at least every
    /// second, at most every hour), each host of the store looks.
    pub fn retain(mut self, age: Duration) -> Server {
        self.retain = Some(age);
        self
    }

    /// Answers `api`'s requests through each host it builds ([`Client::serving`], with the
    /// [`grants`](Self::grants) for modules the host has not loaded): a start over HTTP runs in
    /// the host, and so on. Between two hosts (one lost the store, the next is being built),
    /// the API answers `503`.
    pub fn api(mut self, api: Api) -> Server {
        self.api = Some(api);
        self
    }

    /// What stops this server.
    pub fn stopper(&self) -> Stopper {
        Stopper {
            stop: Arc::clone(&self.stop),
            wake: self.wake.0.clone(),
        }
    }

    /// Serves the store with hosts made by `build` (a host on the store, its host functions
    /// registered and its modules loaded) until [`Stopper::stop`]. Returns an error when a
    /// host cannot be built, or when the store of a host that has it to itself fails (a host
    /// that shares a store starts again as a new host instead).
    pub fn run(&self, mut build: impl FnMut() -> Result<Host>) -> Result<()> {
        loop {
            let host = build()?;
            let served = self.serve(&host);
            if served? {
                return Ok(());
            }
        }
    }

    /// Serves with `host` until it is stopped (`true`) or loses the store (`false`: a new host
    /// goes on); the API, if any, through it meanwhile.
    fn serve(&self, host: &Host) -> Result<bool> {
        // The only host of a store recovers everything unfinished before the API reaches it:
        // a message for a workflow is then delivered by the host that runs it, never kept for
        // a recovery that already read the store.
        let own = host.store_host().is_none();
        if own {
            self.claim_some(host);
        }
        if let Some(api) = &self.api {
            let grants = self.grants.clone().unwrap_or_default();
            match Client::serving(host, grants) {
                Ok(client) => api.set_client(Some(client)),
                Err(error) => {
                    host.shutdown(Duration::ZERO);
                    return Err(error);
                }
            }
        }
        let retention = match self.retain {
            Some(age) => Some(retention::start(host, age)?),
            None => None,
        };
        let firing = match schedules::start(host, self.grants.clone().unwrap_or_default()) {
            Ok(firing) => firing,
            Err(error) => {
                if let Some(api) = &self.api {
                    api.set_client(None);
                }
                host.shutdown(Duration::ZERO);
                return Err(error);
            }
        };
        let served = self.serve_host(host, !own);
        if let Some(api) = &self.api {
            api.set_client(None);
        }
        drop(firing);
        drop(retention);
        served
    }

    /// Serves with `host`; `first`: it has not claimed yet.
    fn serve_host(&self, host: &Host, mut first: bool) -> Result<bool> {
        let wake = self.wake.0.clone();
        // Clients' starts, messages and cancels wake the host at once; the poll is the fallback.
        if let Err(error) = host.on_new_work(move || {
            let _ = wake.try_send(());
        }) {
            host.shutdown(Duration::ZERO);
            return Err(error);
        }
        let who = host
            .store_host()
            .map_or_else(|| "the only host".to_string(), |id| format!("host {id}"));
        tracing::info!("serving the store as {who}");
        loop {
            if self.stop.load(Ordering::Acquire) {
                tracing::info!("stopping; giving back what this host runs");
                let report = host.shutdown(self.grace);
                tracing::info!(?report, "stopped");
                return Ok(true);
            }
            if let Some(error) = host.store_failure() {
                host.shutdown(Duration::ZERO);
                if host.store_host().is_none() {
                    return Err(error);
                }
                tracing::error!("{}; starting again as a new host", error.message());
                return Ok(false);
            }
            if host.store_host().is_none() && !first {
                // The only host: everything unfinished was recovered at the start, and new
                // workflows come from this host alone.
                self.wait();
                continue;
            }
            first = false;
            if !self.claim_some(host) {
                self.wait();
            }
        }
    }

    /// Claims what the host has room for: whether it claimed a full batch (more may wait).
    fn claim_some(&self, host: &Host) -> bool {
        // A host claims only while it has room: the others take the rest.
        let free = host.capacity().processes.saturating_sub(host.live());
        let limit = self.claim.min(free);
        if limit == 0 {
            return false;
        }
        let claimed = match &self.grants {
            Some(grants) => host.claim_with(grants.clone(), limit),
            None => host.claim(limit),
        };
        match claimed {
            Ok(runs) if !runs.is_empty() => {
                tracing::info!(claimed = runs.len(), live = host.live(), "claimed");
                runs.len() >= limit
            }
            Ok(_) => false,
            Err(error) if host.store_failure().is_some() => {
                tracing::debug!("claiming failed with the store: {}", error.message());
                false
            }
            Err(error) => {
                tracing::warn!("claiming workflows: {}", error.message());
                false
            }
        }
    }

    /// Waits for work to wake the server, or the poll.
    fn wait(&self) {
        let _ = self.wake.1.recv_timeout(self.poll);
    }
}
