//! The `wfhost` command: build, inspect and run workflow modules.

mod args;
mod commands;
mod config;
mod events;
mod exit;
mod output;
mod traces;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser};
use tracing_subscriber::EnvFilter;

/// Runs WebAssembly workflows: sandboxed workflows written in Rust, compiled to wasm32-wasip1.
///
/// A workflow module is a Rust crate (crate-type "cdylib") that uses the wfguest SDK and names its
/// entry points with `wfguest::entry_points!`. `wfhost build` compiles one; `wfhost run` runs one
/// entry point to completion and prints its result as JSON; `wfhost inspect` shows what a module
/// declares without running it.
///
/// Exit codes: 0 success; 1 the workflow ran and failed; 2 it could not start (bad usage, an
/// unreadable or invalid module, an unknown entry point, invalid input); 3 a workflow with that
/// id exists with another module, entry point or input; 4 the store stopped the workflow (full,
/// read-only, or out of reach), which resumes where its journal ends; 5 a journal in the store
/// cannot be read back (damage; nothing was changed).
#[derive(Debug, Parser)]
#[command(name = "wfhost", version, max_term_width = 100)]
struct Cli {
    #[command(subcommand)]
    command: commands::Command,

    /// More logging on stderr: -v info, -vv the host's debug lines, -vvv everything. RUST_LOG,
    /// when set, wins.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
}

fn init_logging(verbose: u8) {
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.is_empty() => EnvFilter::new(directives),
        _ => EnvFilter::new(match verbose {
            // Guest logs are the workflow's own output: shown by default.
            // HTTP/2's crate warns of what a client sends (a ping it did not ask for): a
            // client could fill the log.
            0 => "warn,h2=error,wfhost::guest=info",
            1 => "info,h2=error",
            // The host's own debug lines, not its dependencies' (wasmtime's compiler is chatty).
            2 => "info,wfhost=debug,wfhost_scheduler=debug,wfhost_cli=debug",
            _ => "trace",
        }),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

/// A `WFHOST_*` variable that is set and empty (`WFHOST_SERVER=`, as a shell script leaves one
/// it clears) means what an unset one does: nothing given.
fn forget_empty_settings() {
    let empty: Vec<std::ffi::OsString> = std::env::vars_os()
        .filter(|(name, value)| name.to_string_lossy().starts_with("WFHOST_") && value.is_empty())
        .map(|(name, _)| name)
        .collect();
    for name in empty {
        // Before any thread is started: nothing reads the environment meanwhile.
        std::env::remove_var(name);
    }
}

fn main() -> ExitCode {
    forget_empty_settings();
    // `wfhost serve --config FILE`: the file's settings as flags, before clap reads them.
    let expanded = match config::expand(std::env::args_os().collect()) {
        Ok(expanded) => expanded,
        Err(error) => {
            eprintln!("error: {error:#}");
            return ExitCode::from(2);
        }
    };
    let matches = match (
        Cli::command().try_get_matches_from(expanded.args),
        &expanded.file,
    ) {
        (Ok(matches), _) => matches,
        // A setting of the file that its flag does not take: said with the file's name.
        (Err(error), Some(file)) if config::about_the_file(&error, &expanded.from_file) => {
            eprintln!("error: {:#}", config::refused(file, &error));
            return ExitCode::from(2);
        }
        (Err(error), _) => error.exit(),
    };
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Some(serve) = matches.subcommand_matches("serve") {
        cli.command.describe(serve, &expanded.from_file);
    }
    init_logging(cli.verbose);
    match cli.command.execute() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if output::is_broken_pipe(&error) => output::die_of_broken_pipe(),
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(exit::exit_code(&error))
        }
    }
}
