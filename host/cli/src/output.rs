//! Standard output. A reader that goes away (`wfhost list | head -1`) ends the command quietly,
//! as Unix tools end: killed by `SIGPIPE`, with no message. Only writes to stdout do that: the
//! signal stays ignored for the rest of the process (a socket to PostgreSQL whose peer went away
//! is an error to handle, not a reason to die).

use std::io::Write;

/// Writes a line to stdout: `outln!("{id}: {result}")?`. A closed stdout is an error that
/// [`exit_if_broken_pipe`] turns into a quiet exit.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::write_line(format_args!($($arg)*))
    };
}
pub(crate) use outln;

/// Writes `args` and a newline to stdout.
pub fn write_line(args: std::fmt::Arguments<'_>) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .map_err(stdout_error)
}

/// Stdout's reader went away: the command ends quietly ([`die_of_broken_pipe`]).
#[derive(Debug, thiserror::Error)]
#[error("stdout was closed")]
pub struct StdoutClosed;

/// An error writing to stdout: [`StdoutClosed`] for a pipe whose reader has gone (and only for
/// stdout: a broken pipe elsewhere, to a child process or a socket, is an error to report).
pub fn stdout_error(error: std::io::Error) -> anyhow::Error {
    if error.kind() == std::io::ErrorKind::BrokenPipe {
        anyhow::Error::new(StdoutClosed)
    } else {
        anyhow::Error::new(error).context("writing to stdout")
    }
}

/// Whether `error` is stdout's reader going away.
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.downcast_ref::<StdoutClosed>().is_some()
}

/// Ends the process as a Unix tool ends when its reader goes away: by `SIGPIPE` (a shell sees
/// status 141), with nothing printed.
pub fn die_of_broken_pipe() -> ! {
    #[cfg(unix)]
    // SAFETY: `signal` and `raise` are async-signal-safe libc calls with valid arguments; the
    // default disposition of SIGPIPE terminates the process.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    std::process::exit(141)
}
