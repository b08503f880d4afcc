//! Host commands: functions the embedding application registers by name, which workflows call with
//! `ctx.call(name, input)`. They run on a fixed pool of threads, never on a worker, so a slow one
//! (a payment API, a database) holds up nothing but itself.

use std::collections::HashMap;
use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, TrySendError};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::Serialize;
use wfcontract::{Command, CommandError, ErrorKind, Payload, Pid};
use wfhost_scheduler::{Completer, Context, Handler, Request};

/// Who is calling a host command.
#[derive(Clone, Copy, Debug)]
pub struct CallInfo {
    /// The calling process.
    pub pid: Pid,
}

/// A registered host command.
pub(crate) type HostCommand =
    Arc<dyn Fn(CallInfo, Payload) -> Result<Payload, CommandError> + Send + Sync>;

/// Adapts a typed function: the input is decoded from whatever encoding it came in, the output
/// encoded in that same encoding, and an error becomes a `failed` command error.
pub(crate) fn typed<I, O, E, F>(f: F) -> HostCommand
where
    I: DeserializeOwned,
    O: Serialize,
    E: Display,
    F: Fn(I) -> Result<O, E> + Send + Sync + 'static,
{
    Arc::new(move |_, input: Payload| {
        let value: I = input
            .decode()
            .map_err(|e| CommandError::new(ErrorKind::InvalidInput, format!("bad input: {e}")))?;
        let output = f(value).map_err(|e| CommandError::new(ErrorKind::Failed, e.to_string()))?;
        Payload::encode(input.encoding, &output)
            .map_err(|e| CommandError::new(ErrorKind::Failed, format!("bad output: {e}")))
    })
}

struct Job {
    name: String,
    command: HostCommand,
    info: CallInfo,
    input: Payload,
    completer: Completer,
}

/// The `call` handler: looks the name up and hands the call to the pool.
pub(crate) struct Calls {
    commands: HashMap<String, HostCommand>,
    jobs: Mutex<Option<Sender<Job>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Set at shutdown: queued calls are answered `unavailable` instead of run.
    stopping: Arc<AtomicBool>,
}

impl Calls {
    /// Starts `threads` pool threads (none if no command is registered), with room for `queue`
    /// calls waiting for a thread.
    pub(crate) fn start(
        commands: HashMap<String, HostCommand>,
        threads: usize,
        queue: usize,
    ) -> std::io::Result<Calls> {
        let (sender, receiver) = crossbeam_channel::bounded::<Job>(queue);
        let stopping = Arc::new(AtomicBool::new(false));
        let count = if commands.is_empty() {
            0
        } else {
            threads.max(1)
        };
        let threads = (0..count)
            .map(|i| {
                let receiver: Receiver<Job> = receiver.clone();
                let stopping = Arc::clone(&stopping);
                std::thread::Builder::new()
                    .name(format!("wfhost-call-{i}"))
                    .spawn(move || {
                        for job in receiver {
                            if stopping.load(Ordering::Acquire) {
                                job.completer.complete(Err(shutting_down()));
                            } else {
                                run(job);
                            }
                        }
                    })
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Calls {
            commands,
            jobs: Mutex::new(Some(sender)),
            threads: Mutex::new(threads),
            stopping,
        })
    }
}

fn run(job: Job) {
    let Job {
        name,
        command,
        info,
        input,
        completer,
    } = job;
    let result = match catch_unwind(AssertUnwindSafe(|| command(info, input))) {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            tracing::error!(command = %name, pid = %info.pid, "host command panicked: {message}");
            Err(CommandError::new(
                ErrorKind::Failed,
                format!("host command '{name}' panicked: {message}"),
            ))
        }
    };
    completer.complete(result);
}

impl Handler for Calls {
    fn handle(&self, request: Request, cx: &Context<'_>) {
        let Command::Call(call) = request.command else {
            return;
        };
        let Some(command) = self.commands.get(&call.name) else {
            let mut known: Vec<&str> = self.commands.keys().map(String::as_str).collect();
            known.sort_unstable();
            let message = format!(
                "no host command named '{}' (registered: {})",
                call.name,
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            );
            cx.complete(
                request.tag,
                Err(CommandError::new(ErrorKind::UnknownCommand, message)),
            );
            return;
        };
        let job = Job {
            name: call.name,
            command: Arc::clone(command),
            info: CallInfo { pid: request.pid },
            input: call.input,
            completer: cx.completer(request.tag),
        };
        // Never block a worker on a busy pool: a full queue refuses the call, and the workflow
        // sees why.
        let refused = match self.jobs.lock().as_ref() {
            Some(jobs) => match jobs.try_send(job) {
                Ok(()) => None,
                Err(TrySendError::Full(job)) => Some((job, queue_full(jobs.capacity()))),
                Err(TrySendError::Disconnected(job)) => Some((job, shutting_down())),
            },
            None => Some((job, shutting_down())),
        };
        if let Some((job, error)) = refused {
            job.completer.complete(Err(error));
        }
    }

    fn shutdown(&self) {
        // Calls already running finish; queued ones are answered, not run; then the threads exit.
        self.stopping.store(true, Ordering::Release);
        self.jobs.lock().take();
        for thread in self.threads.lock().drain(..) {
            let _ = thread.join();
        }
    }
}

fn queue_full(capacity: Option<usize>) -> CommandError {
    CommandError::new(
        ErrorKind::LimitReached,
        format!(
            "the host-command queue is full ({} calls wait for a thread); retry later",
            capacity.unwrap_or(0)
        ),
    )
}

fn shutting_down() -> CommandError {
    CommandError::new(ErrorKind::Unavailable, "the host is shutting down")
}

/// `now`: the wall clock, as nanoseconds since the Unix epoch.
pub(crate) fn now(request: Request, cx: &Context<'_>) {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let result = Payload::to_postcard(&nanos)
        .map_err(|e| CommandError::new(ErrorKind::Failed, e.to_string()));
    cx.complete(request.tag, result);
}

/// `random`: 64 bits from the operating system's generator.
pub(crate) fn random(request: Request, cx: &Context<'_>) {
    let result = getrandom::u64()
        .map_err(|e| CommandError::new(ErrorKind::Unavailable, format!("no randomness: {e}")))
        .and_then(|bits| {
            Payload::to_postcard(&bits)
                .map_err(|e| CommandError::new(ErrorKind::Failed, e.to_string()))
        });
    cx.complete(request.tag, result);
}
