//! A process started by the embedding application: options to start it with, and the handle that
//! gives its result and the messages it sends the host.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use wfcontract::{Payload, Pid};
use wfhost_scheduler::{OutboxReceiver, ProcessResult};

use crate::error::{Error, ErrorKind, Result};
use crate::grants::Grants;
use crate::observe::shown;
use crate::wasm::Limits;

/// How to start one process: [`Host::spawn_with`](crate::Host::spawn_with). Every option
/// defaults to the host's own setting.
///
/// ```
/// use std::time::Duration;
/// use wfhost::{Grants, Limits, SpawnOptions};
///
/// let untrusted = SpawnOptions::new()
///     .grants(Grants::none())
///     .limits(Limits::default().max_memory_bytes(16 << 20))
///     .timeout(Duration::from_secs(30));
/// # let _ = untrusted;
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct SpawnOptions {
    pub(crate) grants: Option<Grants>,
    pub(crate) limits: Option<Limits>,
    pub(crate) timeout: Option<Duration>,
}

impl SpawnOptions {
    /// The host's settings.
    pub fn new() -> SpawnOptions {
        SpawnOptions::default()
    }

    /// What this process may do, instead of its module's grants. Its children run with their own
    /// modules' grants. Default: the module's.
    pub fn grants(mut self, grants: Grants) -> SpawnOptions {
        self.grants = Some(grants);
        self
    }

    /// This process's limits, which its children inherit. They may be lower than the host's but
    /// not higher where the engine fixes them: no more memory, tables or memories, the host's
    /// stack size, and fuel only when the host counts fuel (a spawn asking otherwise fails with
    /// [`ErrorKind::Config`]). The module limits (size, compile time) do not apply to a spawn.
    /// Default: the host's.
    pub fn limits(mut self, limits: Limits) -> SpawnOptions {
        self.limits = Some(limits);
        self
    }

    /// How long the process may run in all: past it, it ends (at its next turn, without another
    /// step) with [`ErrorKind::Timeout`], and its children are cancelled. Default: no limit.
    pub fn timeout(mut self, timeout: Duration) -> SpawnOptions {
        self.timeout = Some(timeout);
        self
    }
}

/// A message a process sent to the host (to [`Pid::HOST`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Message {
    /// The sender: the process started, or one of its descendants.
    pub from: Pid,
    /// What it sent.
    pub data: Payload,
}

impl Message {
    /// The message decoded as `T`, from whatever encoding it came in.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T> {
        self.data.decode().map_err(|e| {
            Error::new(
                ErrorKind::BadOutput,
                format!("a message from process {}: {e}", self.from),
            )
        })
    }
}

/// A running process started by [`Host::spawn`](crate::Host::spawn): wait for its result, and read
/// what it (or its descendants) send to [`Pid::HOST`]. `T` is what the result is decoded as:
/// the raw [`Payload`] unless [`Run::decoded`] says otherwise.
pub struct Run<T = Payload> {
    pid: Pid,
    result: Receiver<(Pid, ProcessResult)>,
    /// The result, once it arrived while waiting for a message.
    arrived: Mutex<Option<ProcessResult>>,
    messages: OutboxReceiver,
    /// Every sender of messages has gone: only the result can still come.
    senders_gone: AtomicBool,
    decode: fn(Payload) -> Result<T>,
}

impl<T> std::fmt::Debug for Run<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

impl From<crate::engine::Spawned> for Run<Payload> {
    fn from(spawned: crate::engine::Spawned) -> Run<Payload> {
        Run::new(spawned.pid, spawned.result, spawned.messages)
    }
}

impl Run<Payload> {
    pub(crate) fn new(
        pid: Pid,
        result: Receiver<(Pid, ProcessResult)>,
        messages: OutboxReceiver,
    ) -> Run<Payload> {
        Run {
            pid,
            result,
            arrived: Mutex::new(None),
            messages,
            senders_gone: AtomicBool::new(false),
            decode: Ok,
        }
    }

    /// The same run, its result decoded as `T` (from whatever encoding it came in); a result
    /// that does not decode is an error of kind [`ErrorKind::BadOutput`].
    pub fn decoded<T: DeserializeOwned>(self) -> Run<T> {
        Run {
            pid: self.pid,
            result: self.result,
            arrived: self.arrived,
            messages: self.messages,
            senders_gone: self.senders_gone,
            decode: |payload| {
                payload.decode().map_err(|e| {
                    Error::new(
                        ErrorKind::BadOutput,
                        format!("the result does not decode as the type asked for: {e}"),
                    )
                })
            },
        }
    }
}

impl<T> Run<T> {
    /// The process's pid.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    fn outcome(&self, result: ProcessResult) -> Result<T> {
        match result {
            Ok(payload) => (self.decode)(payload),
            Err(error) => Err(Error::failed(&error)),
        }
    }

    /// The result, if it has arrived; waits at most `timeout` for it.
    fn result_within(&self, timeout: Option<Duration>) -> Option<ProcessResult> {
        if let Some(result) = self.arrived.lock().take() {
            return Some(result);
        }
        let received = match timeout {
            Some(timeout) => self.result.recv_timeout(timeout),
            None => self
                .result
                .recv()
                .map_err(|_| RecvTimeoutError::Disconnected),
        };
        match received {
            Ok((_, result)) => Some(result),
            Err(RecvTimeoutError::Timeout) => None,
            // Another thread reading messages may have taken the result meanwhile and kept it.
            Err(RecvTimeoutError::Disconnected) => Some(
                self.arrived
                    .lock()
                    .take()
                    .unwrap_or_else(|| Err(lost(self.pid))),
            ),
        }
    }

    /// Blocks until the process finishes; its result, or why it failed.
    pub fn wait(self) -> Result<T> {
        let result = self
            .result_within(None)
            .unwrap_or_else(|| Err(lost(self.pid)));
        self.outcome(result)
    }

    /// Waits at most `timeout`: `None` while the process is still running. The result is
    /// handed out once.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<Result<T>> {
        self.result_within(Some(timeout))
            .map(|result| self.outcome(result))
    }

    /// The result if the process has finished, without waiting.
    pub fn try_result(&self) -> Option<Result<T>> {
        self.wait_timeout(Duration::ZERO)
    }

    /// The same run, no longer taking the messages its process sends the host: for a caller
    /// that only waits for the result, so that an outbox nobody reads never fills. A durable
    /// workflow's messages are kept in the store (`wfhost history` shows them) and logged;
    /// another process's sends to the host fail with `no-such-process` from then on.
    pub fn without_messages(mut self) -> Run<T> {
        let (_, closed) = wfhost_scheduler::outbox(0, 0);
        let taken = std::mem::replace(&mut self.messages, closed);
        // Sent before now and not read: logged as a durable workflow's later ones are (it may
        // have run a while, a recovered one in particular, before its caller decided).
        for (from, data) in taken.close() {
            tracing::info!(
                target: "wfhost::guest",
                pid = from.0,
                "message to the host: {}",
                shown(&data)
            );
        }
        self.senders_gone = AtomicBool::new(true);
        self
    }

    /// The next message the process (or a descendant) sent to the host, waiting for one while it
    /// runs. `None` once it has finished and every message queued has been read; its result is
    /// kept for [`wait`](Self::wait). Messages are queued before their sender's result, so none
    /// the process sent is missed. Its descendants are cancelled when it finishes and may still
    /// send while they clean up: those are queued too, and later calls return them, but are not
    /// waited for (a descendant that ignores its cancel could otherwise hold this up for as long
    /// as it runs).
    pub fn recv_message(&self) -> Option<Message> {
        self.recv_message_until(None)
    }

    /// As [`recv_message`](Self::recv_message), waiting at most `timeout`: `None` also when
    /// none came in time.
    pub fn recv_message_timeout(&self, timeout: Duration) -> Option<Message> {
        self.recv_message_until(Some(Instant::now() + timeout))
    }

    /// A message already sent, if any, without waiting.
    pub fn try_recv_message(&self) -> Option<Message> {
        self.messages
            .try_recv()
            .map(|(from, data)| Message { from, data })
    }

    fn recv_message_until(&self, deadline: Option<Instant>) -> Option<Message> {
        loop {
            if let Some(message) = self.try_recv_message() {
                return Some(message);
            }
            // Messages are queued before their sender's result is sent, so once the result is
            // here every message is too.
            if self.arrived.lock().is_some() {
                return None;
            }
            let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if timeout == Some(Duration::ZERO) {
                return None;
            }
            let mut select = crossbeam_channel::Select::new();
            // Once every sender is gone only the result can come: a closed channel is always
            // ready, and selecting on it would spin.
            let message = if self.senders_gone.load(Ordering::Relaxed) {
                usize::MAX
            } else {
                select.recv(self.messages.channel())
            };
            let result = select.recv(&self.result);
            let ready = match timeout {
                Some(timeout) => match select.select_timeout(timeout) {
                    Ok(ready) => ready,
                    Err(_) => return None,
                },
                None => select.select(),
            };
            match ready.index() {
                i if i == message => match ready.recv(self.messages.channel()) {
                    Ok(received) => {
                        let (from, data) = received.into_parts();
                        return Some(Message { from, data });
                    }
                    Err(_) => self.senders_gone.store(true, Ordering::Relaxed),
                },
                i if i == result => {
                    let result = ready
                        .recv(&self.result)
                        .map(|(_, result)| result)
                        .unwrap_or_else(|_| Err(lost(self.pid)));
                    *self.arrived.lock() = Some(result);
                }
                _ => unreachable!("two operations were selected on"),
            }
        }
    }
}

fn lost(pid: Pid) -> wfhost_scheduler::ProcessError {
    wfhost_scheduler::ProcessError::with_kind(
        wfhost_scheduler::FailureKind::Terminated,
        format!("process {pid} was dropped without a result (the host shut down)"),
    )
}
