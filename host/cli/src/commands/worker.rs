//! `wfhost worker`: an activity worker that runs a command once per task, so that a shell or
//! Python script serves a function of the workflows.

use std::io::{Read as _, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::value::RawValue;
use wfhost_client::wire::{CompleteRequest, TaskErrorJson, TaskJson};
use wfhost_client::Client;

use crate::args::units::parse_duration;

/// The exit status a command uses to say that its error will not go away on a retry.
pub const EXIT_REJECTED: i32 = 100;

/// The most of a command's output read.
const MAX_OUTPUT: u64 = 8 << 20;

/// How much of stderr's end an error quotes.
const STDERR_TAIL: usize = 2_000;

/// Serves a function's tasks by running COMMAND once per task.
///
/// Each task's input is written to the command's stdin as JSON, and what it prints on stdout
/// (JSON; nothing is null) is the result. A non-zero exit is an error the workflow may retry,
/// with the end of stderr as its message; exit 100 is an error not worth retrying. The command
/// also gets WFHOST_FUNCTION, WFHOST_TASK, WFHOST_ATTEMPT and WFHOST_IDEMPOTENCY_KEY (do the
/// effect once per key), and TRACEPARENT when the server is traced (the call's span: the parent
/// of the command's spans). While it runs, the worker heartbeats the task; if the task moves on
/// (the server gave it to another worker), the command is killed.
///
///     wfhost worker --server http://127.0.0.1:8080 --function email.send -- ./send-email.sh
#[derive(Debug, clap::Parser)]
pub struct WorkerCommand {
    /// The `wfhost serve --http` server whose tasks to take.
    #[arg(long, value_name = "URL", env = "WFHOST_SERVER")]
    server: String,

    /// A file holding the server's token, or a worker token for these functions. Default: the
    /// WFHOST_TOKEN variable.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,

    /// With an https:// server: trust the certificates in this PEM file.
    #[arg(long, value_name = "FILE", env = "WFHOST_CA_FILE")]
    ca_file: Option<PathBuf>,

    /// A function this worker serves. Repeatable.
    #[arg(long = "function", value_name = "NAME", required = true)]
    functions: Vec<String>,

    /// Tasks run at once.
    #[arg(long, value_name = "N", default_value_t = 4)]
    concurrency: usize,

    /// How long one run of the command may take; past it, it is killed and the task fails
    /// (retryably).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    timeout: Duration,

    /// How long one poll waits for a task.
    #[arg(long, value_name = "DURATION", default_value = "20s", value_parser = parse_duration)]
    poll_wait: Duration,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// What every runner shares.
struct RunnerContext {
    client: Client,
    functions: Vec<String>,
    command: Vec<String>,
    timeout: Duration,
    poll_wait: Duration,
    stopping: AtomicBool,
    running: AtomicUsize,
}

impl WorkerCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        anyhow::ensure!(self.concurrency > 0, "--concurrency must be at least 1");
        let machine = machine_name();
        let name = format!("wfhost-worker@{machine}:{}", std::process::id());
        let mut client = Client::new(&self.server)?.with_worker_name(name, machine);
        if let Some(token) = crate::args::target::token(self.token_file.as_deref())? {
            client = client.with_token(token);
        }
        if let Some(path) = &self.ca_file {
            let pem = std::fs::read(path)
                .with_context(|| format!("cannot read --ca-file {}", path.display()))?;
            client = client.with_root_certificates(&pem)?;
        }
        let shared = Arc::new(RunnerContext {
            client,
            functions: self.functions.clone(),
            command: self.command.clone(),
            timeout: self.timeout,
            poll_wait: self.poll_wait,
            stopping: AtomicBool::new(false),
            running: AtomicUsize::new(0),
        });
        let stopper = Arc::clone(&shared);
        ctrlc::set_handler(move || {
            stopper.stopping.store(true, Ordering::SeqCst);
            if stopper.running.load(Ordering::SeqCst) == 0 {
                std::process::exit(0);
            }
            eprintln!("wfhost worker: stopping once the tasks running finish");
        })
        .context("cannot install the SIGTERM and Ctrl-C handler")?;
        eprintln!(
            "wfhost worker: serving {} from {} ({} at once)",
            self.functions.join(", "),
            self.server,
            self.concurrency
        );
        let runners: Vec<_> = (0..self.concurrency)
            .map(|n| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("worker-{n}"))
                    .spawn(move || serve(&shared))
            })
            .collect::<Result<_, _>>()
            .context("cannot start the worker's threads")?;
        for runner in runners {
            let _ = runner.join();
        }
        Ok(())
    }
}

/// Takes tasks and runs them until stopped.
fn serve(shared: &RunnerContext) {
    let mut failures = 0u32;
    while !shared.stopping.load(Ordering::SeqCst) {
        let task = match shared.client.poll_task(&shared.functions, shared.poll_wait) {
            Ok(Some(task)) => task,
            Ok(None) => continue,
            Err(error) => {
                failures += 1;
                eprintln!("wfhost worker: cannot take a task: {error}");
                // The server may be restarting: ask again, less often the longer it lasts.
                std::thread::sleep(Duration::from_millis(200 << failures.min(5)));
                continue;
            }
        };
        failures = 0;
        shared.running.fetch_add(1, Ordering::SeqCst);
        let completion = run(shared, &task);
        if let Some(completion) = completion {
            complete(shared, &task, &completion);
        }
        shared.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs the command for `task`; its completion, or `None` if the task moved on meanwhile.
fn run(shared: &RunnerContext, task: &TaskJson) -> Option<CompleteRequest> {
    let fail = |message: String, retryable: bool| {
        Some(CompleteRequest {
            result: None,
            error: Some(TaskErrorJson { message, retryable }),
            next: None,
        })
    };
    let mut command = Command::new(&shared.command[0]);
    // The call's span, as OpenTelemetry's environment carrier names it; never the worker's own.
    match &task.traceparent {
        Some(parent) => command.env("TRACEPARENT", parent),
        None => command.env_remove("TRACEPARENT"),
    };
    let mut child = match command
        .args(&shared.command[1..])
        .env("WFHOST_FUNCTION", &task.function)
        .env("WFHOST_TASK", &task.task)
        .env("WFHOST_ATTEMPT", task.attempt.to_string())
        .env(
            "WFHOST_IDEMPOTENCY_KEY",
            task.idempotency_key.as_deref().unwrap_or(""),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
    {
        Ok(child) => child,
        Err(error) => {
            return fail(
                format!("the worker could not run {}: {error}", shared.command[0]),
                true,
            )
        }
    };
    let input = task.input.get().as_bytes().to_vec();
    let mut stdin = child.stdin.take();
    let writer = std::thread::spawn(move || {
        if let Some(stdin) = stdin.as_mut() {
            // A command that does not read its input closes the pipe: not an error.
            let _ = stdin.write_all(&input);
        }
    });
    let stdout = child.stdout.take().map(|out| reader(out, MAX_OUTPUT));
    let stderr = child.stderr.take().map(|err| reader(err, MAX_OUTPUT));
    // The command leads a process group of its own: killing the group reaches what it started
    // too, and needs no pid that the waiter below may already have reaped.
    let group = child.id();
    let (done, finished) = crossbeam_channel::bounded(1);
    let waiter = std::thread::spawn(move || {
        let status = child.wait();
        let _ = done.send(status);
    });
    let started = Instant::now();
    // Heartbeats at a third of the time the server gives, so two may be lost; the time left is
    // read from the server's deadline and this machine's clock, so it is kept within bounds
    // that a clock off by some seconds cannot make useless.
    let window = (Duration::from_millis(task.deadline_ms.saturating_sub(now_ms())) / 3)
        .clamp(Duration::from_millis(100), Duration::from_secs(20));
    let status = loop {
        let left = shared.timeout.saturating_sub(started.elapsed());
        match finished.recv_timeout(window.min(left).max(Duration::from_millis(1))) {
            Ok(status) => break status,
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                break Err(std::io::Error::other("the command's waiter went away"))
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
        }
        if started.elapsed() >= shared.timeout {
            kill(group);
            let _ = finished.recv();
            return fail(
                format!(
                    "{} did not finish within {:?} (--timeout) and was killed",
                    shared.command[0], shared.timeout
                ),
                true,
            );
        }
        if let Err(error) = shared.client.heartbeat_task(&task.task) {
            if error.status() == Some(409) || error.status() == Some(404) {
                eprintln!(
                    "wfhost worker: task {} moved on; stopping its command",
                    task.task
                );
                kill(group);
                let _ = finished.recv();
                return None;
            }
        }
    };
    // Whatever the command left running would hold its pipes open: the group goes with it.
    kill(group);
    let _ = writer.join();
    let _ = waiter.join();
    let out = stdout.and_then(|r| r.join().ok()).unwrap_or_default();
    let err = stderr.and_then(|r| r.join().ok()).unwrap_or_default();
    let status = match status {
        Ok(status) => status,
        Err(error) => {
            return fail(
                format!("the command could not be waited for: {error}"),
                true,
            )
        }
    };
    if !status.success() {
        let tail = tail(&err);
        let code = status.code();
        return fail(
            format!(
                "{} exited with {}{}",
                shared.command[0],
                code.map_or_else(|| "a signal".to_string(), |c| format!("status {c}")),
                if tail.is_empty() {
                    String::new()
                } else {
                    format!(": {tail}")
                }
            ),
            code != Some(EXIT_REJECTED),
        );
    }
    let text = String::from_utf8_lossy(&out);
    let text = text.trim();
    let text = if text.is_empty() { "null" } else { text };
    match RawValue::from_string(text.to_string()) {
        Ok(result) => Some(CompleteRequest {
            result: Some(result),
            error: None,
            next: None,
        }),
        Err(error) => fail(
            format!(
                "{} printed what is not JSON ({error}): a worker's command prints its result as \
                 JSON on stdout",
                shared.command[0]
            ),
            false,
        ),
    }
}

/// Sends `completion`, trying again while the server cannot be reached and the task is not
/// past its deadline.
fn complete(shared: &RunnerContext, task: &TaskJson, completion: &CompleteRequest) {
    loop {
        match shared.client.complete_task(&task.task, completion) {
            Ok(()) => return,
            Err(error) if error.status().is_some() => {
                eprintln!("wfhost worker: task {} not completed: {error}", task.task);
                return;
            }
            Err(error) => {
                if now_ms() >= task.deadline_ms {
                    eprintln!(
                        "wfhost worker: task {} not completed in time: {error}",
                        task.task
                    );
                    return;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }
}

/// Reads `from` to its end (keeping at most `limit` bytes) on a thread of its own.
fn reader(
    from: impl std::io::Read + Send + 'static,
    limit: u64,
) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let mut from = from.take(limit);
        let _ = from.read_to_end(&mut bytes);
        // The rest is drained so that the command is not blocked on a full pipe.
        let _ = std::io::copy(&mut from.into_inner(), &mut std::io::sink());
        bytes
    })
}

fn tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim();
    let start = text.len().saturating_sub(STDERR_TAIL);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    text[start..].to_string()
}

/// Kills process group `group` (the command's, and what it started).
fn kill(group: u32) {
    // SAFETY: kill(2) with a negated process group id and a signal number; no memory is
    // involved. A group that is gone (ESRCH) is fine.
    unsafe {
        libc::kill(-(group as libc::pid_t), libc::SIGKILL);
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// This machine's name, as the server shows the worker's pollers.
fn machine_name() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .map(|name| name.trim().to_string())
        .chain(std::env::var("HOSTNAME").ok())
        .find(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}
