//! WASI preview 1 for guests: linked because Rust's std needs it, with nothing behind it. No
//! preopened directories, no environment, no arguments, an empty stdin; stdout and stderr go to
//! the host's log, line by line, tagged with the process's pid.
//!
//! The context holds no state a guest can change (the runtime answers `fd_close` and the other
//! calls that would with `notsup`), so a process restored from hibernation gets a fresh one.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use parking_lot::Mutex;
use wasmtime::{Engine, Linker};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::WasiCtxBuilder;
use wfcontract::Pid;

use crate::wasm::{Forbidden, GuestState};
use wfcontract::abi::WASI_MODULE;

/// A guest line longer than this is logged in pieces, so a guest cannot grow the host's buffer
/// without bound by never writing a newline.
const MAX_LINE: usize = 8 * 1024;

/// Lines a guest may log per call into it (its `init` or one step); the rest are counted and
/// dropped, so a guest cannot keep the host busy logging past its time limit.
pub(crate) const LINES_PER_CALL: usize = 1_000;

struct Lines {
    pid: Pid,
    /// The workflow id of a durable workflow.
    workflow: Option<Arc<str>>,
    stream: &'static str,
    partial: Vec<u8>,
    /// The last complete line worth quoting, logged or not, kept to explain a trap that left no
    /// panic message (an allocation failure, say).
    last: Vec<u8>,
    /// Lines this call may still log.
    budget: usize,
    /// Lines dropped since the budget ran out.
    dropped: usize,
    /// Not logged: a durable workflow replaying what it logged before a restart.
    muted: bool,
}

impl Lines {
    fn push(&mut self, mut bytes: &[u8]) {
        while let Some(newline) = bytes.iter().position(|b| *b == b'\n') {
            self.partial.extend_from_slice(&bytes[..newline]);
            self.emit();
            bytes = &bytes[newline + 1..];
        }
        self.partial.extend_from_slice(bytes);
        while self.partial.len() > MAX_LINE {
            let rest = self.partial.split_off(MAX_LINE);
            self.emit();
            self.partial = rest;
        }
    }

    fn emit(&mut self) {
        if self.muted {
            // Logged before, by the run this one replays.
        } else if self.budget == 0 {
            self.dropped += 1;
        } else {
            self.budget -= 1;
            let line = String::from_utf8_lossy(&self.partial);
            match &self.workflow {
                Some(id) => tracing::info!(
                    target: "wfhost::guest",
                    pid = self.pid.0,
                    workflow = &**id,
                    stream = self.stream,
                    "{line}"
                ),
                None => {
                    tracing::info!(target: "wfhost::guest", pid = self.pid.0, stream = self.stream, "{line}")
                }
            }
        }
        // std's hint about RUST_BACKTRACE explains nothing about the failure itself.
        let blank = self.partial.iter().all(u8::is_ascii_whitespace);
        if !blank && !self.partial.starts_with(b"note: run with `RUST_BACKTRACE") {
            std::mem::swap(&mut self.last, &mut self.partial);
        }
        self.partial.clear();
    }

    fn finish(&mut self) {
        if !self.partial.is_empty() {
            self.emit();
        }
    }
}

/// One of a guest's output streams, forwarded to `tracing`.
#[derive(Clone)]
pub(crate) struct LogStream(Arc<Stream>);

struct Stream {
    lines: Mutex<Lines>,
    /// Set by a write, so that a step that wrote nothing need not lock the lines to start anew.
    written: AtomicBool,
}

impl LogStream {
    fn push(&self, bytes: &[u8]) {
        self.0.written.store(true, Ordering::Relaxed);
        self.0.lines.lock().push(bytes);
    }
}

impl LogStream {
    fn new(pid: Pid, workflow: Option<Arc<str>>, stream: &'static str) -> LogStream {
        LogStream(Arc::new(Stream {
            lines: Mutex::new(Lines {
                pid,
                workflow,
                stream,
                partial: Vec::new(),
                last: Vec::new(),
                budget: LINES_PER_CALL,
                dropped: 0,
                muted: false,
            }),
            written: AtomicBool::new(false),
        }))
    }

    /// A new call into the guest: a fresh line budget, and a word about what the last one dropped.
    pub(crate) fn new_call(&self) {
        if !self.0.written.swap(false, Ordering::Relaxed) {
            return;
        }
        let mut lines = self.0.lines.lock();
        if lines.dropped > 0 {
            tracing::warn!(
                target: "wfhost::guest",
                pid = lines.pid.0,
                stream = lines.stream,
                "dropped {} lines: a process may log {LINES_PER_CALL} lines per stream per step",
                lines.dropped
            );
            lines.dropped = 0;
        }
        lines.budget = LINES_PER_CALL;
    }

    /// The last non-empty line written so far, including one not yet ended.
    pub(crate) fn last_line(&self) -> String {
        let lines = self.0.lines.lock();
        let partial = String::from_utf8_lossy(&lines.partial);
        if partial.trim().is_empty() {
            String::from_utf8_lossy(&lines.last).into_owned()
        } else {
            partial.into_owned()
        }
    }

    /// Logs a trailing line that has no newline.
    pub(crate) fn finish(&self) {
        self.0.lines.lock().finish();
        self.new_call();
    }
}

impl IsTerminal for LogStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for LogStream {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LogStream {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for LogStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// What of a process's WASI outlives its instance: its two log streams (a hibernated process
/// keeps its partial lines and line budget). Its clocks and randomness are answered by the host
/// (`reads.rs`), from the process's own state.
pub(crate) struct Logs {
    pub(crate) stdout: LogStream,
    pub(crate) stderr: LogStream,
}

impl Logs {
    /// The streams of process `pid`, of durable workflow `workflow` if it is one.
    pub(crate) fn new(pid: Pid, workflow: Option<Arc<str>>) -> Logs {
        Logs {
            stdout: LogStream::new(pid, workflow.clone(), "stdout"),
            stderr: LogStream::new(pid, workflow, "stderr"),
        }
    }

    /// A WASI context writing to these streams: no
    /// preopens, no environment, no arguments, empty stdin (the builder's defaults).
    pub(crate) fn wasi(&self) -> WasiP1Ctx {
        WasiCtxBuilder::new()
            .stdout(self.stdout.clone())
            .stderr(self.stderr.clone())
            .build_p1()
    }

    /// A new call into the guest (see [`LogStream::new_call`]).
    pub(crate) fn new_call(&self) {
        self.stdout.new_call();
        self.stderr.new_call();
    }

    /// Stops (or starts again) logging what the guest writes.
    pub(crate) fn mute(&self, muted: bool) {
        self.stdout.0.lines.lock().muted = muted;
        self.stderr.0.lines.lock().muted = muted;
    }

    /// The process is done: log what is left.
    pub(crate) fn finish(&self) {
        self.stdout.finish();
        self.stderr.finish();
    }
}

/// WASI preview 1's `errno::notsup`.
const WASI_ERRNO_NOTSUP: i32 = 58;

/// The linker every module is instantiated with: WASI preview 1 with nothing behind it, less what a
/// workflow may not do.
pub(crate) fn linker(engine: &Engine) -> wasmtime::Result<Linker<GuestState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |state: &mut GuestState| &mut state.wasi)?;
    // WASI's poll_oneoff would put the worker thread itself to sleep (it is how
    // `std::thread::sleep` waits), out of reach of the step time limit. A workflow waits with
    // the `sleep` command instead; calling it fails the process.
    linker.allow_shadowing(true);
    linker.func_wrap(
        WASI_MODULE,
        "poll_oneoff",
        |_: wasmtime::Caller<'_, GuestState>,
         _: i32,
         _: i32,
         _: i32,
         _: i32|
         -> wasmtime::Result<i32> { Err(wasmtime::Error::new(Forbidden("poll_oneoff"))) },
    )?;
    // The WASI context is rebuilt when a hibernated process is restored, so a guest may not
    // change it: closing, renumbering or re-flagging a descriptor answers "not supported"
    // (the only descriptors are stdin, stdout and stderr) and changes nothing.
    linker.func_wrap(
        WASI_MODULE,
        "fd_close",
        |_: wasmtime::Caller<'_, GuestState>, _: i32| -> i32 { WASI_ERRNO_NOTSUP },
    )?;
    linker.func_wrap(
        WASI_MODULE,
        "fd_renumber",
        |_: wasmtime::Caller<'_, GuestState>, _: i32, _: i32| -> i32 { WASI_ERRNO_NOTSUP },
    )?;
    linker.func_wrap(
        WASI_MODULE,
        "fd_fdstat_set_flags",
        |_: wasmtime::Caller<'_, GuestState>, _: i32, _: i32| -> i32 { WASI_ERRNO_NOTSUP },
    )?;
    linker.func_wrap(
        WASI_MODULE,
        "fd_fdstat_set_rights",
        |_: wasmtime::Caller<'_, GuestState>, _: i32, _: i64, _: i64| -> i32 { WASI_ERRNO_NOTSUP },
    )?;
    crate::wasm::reads::shadow(&mut linker)?;
    linker.allow_shadowing(false);
    Ok(linker)
}
