//! The sandbox's limits as `wfhost run` flags. Defaults are the library's defaults; a test keeps
//! the two equal.

use std::path::PathBuf;
use std::time::Duration;

use super::units::{parse_duration, parse_size};
use anyhow::bail;
use wfhost::{CommandKind, Grants, Hibernation, HostBuilder, Limits};

/// Sandbox limits: what each process, each module and the host as a whole may consume. A process
/// over a limit fails alone, with a message naming the limit; a module over one is refused at
/// load. Sizes take a unit: B, KiB, MiB or GiB (e.g. 64MiB).
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Sandbox limits")]
pub struct LimitArgs {
    /// The most linear memory one process may use.
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_size)]
    max_memory: usize,

    /// The most elements each table of a process may hold.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    max_table_elements: usize,

    /// The most linear memories a module may define.
    #[arg(long, value_name = "N", default_value_t = 1)]
    max_memories: usize,

    /// The most tables a module may define.
    #[arg(long, value_name = "N", default_value_t = 1)]
    max_tables: usize,

    /// The longest one call into a process (init with its start function, or a step) may run.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    step_limit: Duration,

    /// The most time a process may spend running its own code over its whole life (init and every
    /// step): a process that never stops asking to run ends here instead of holding a worker.
    /// "off" for no bound.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_max_cpu)]
    max_cpu: MaxCpu,

    /// Fuel (about one unit per wasm instruction) one call into a process may burn: a
    /// deterministic budget, where --step-limit is wall time. Default: off.
    #[arg(long, value_name = "N")]
    fuel: Option<u64>,

    /// The most stack a process's wasm frames may use; deeper recursion fails the process.
    #[arg(long, value_name = "SIZE", default_value = "512KiB", value_parser = parse_size)]
    max_stack: usize,

    /// The most commands one step may yield.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    max_yields: usize,

    /// The largest payload: an input, a result, a message, a child's input, a host function's
    /// input.
    #[arg(long, value_name = "SIZE", default_value = "4MiB", value_parser = parse_size)]
    max_payload: usize,

    /// The largest answer one step may return.
    #[arg(long, value_name = "SIZE", default_value = "16MiB", value_parser = parse_size)]
    max_output: usize,

    /// The largest module the host loads.
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_size)]
    max_module_size: usize,

    /// The longest compiling one module may take.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    compile_limit: Duration,

    /// The most processes live at once.
    #[arg(long, value_name = "N", default_value_t = wfhost::DEFAULT_MAX_PROCESSES)]
    max_processes: usize,

    /// The most children one process may have at once (running, or finished and not joined).
    #[arg(long, value_name = "N", default_value_t = wfhost::DEFAULT_MAX_CHILDREN)]
    max_children: usize,

    /// The most messages queued for one process.
    #[arg(long, value_name = "N", default_value_t = wfhost::DEFAULT_MAILBOX_LIMIT)]
    mailbox_limit: usize,

    /// The most message bytes queued for one process.
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_size)]
    mailbox_bytes: usize,

    /// The most sleeps one process may have pending.
    #[arg(long, value_name = "N", default_value_t = wfhost::DEFAULT_MAX_SLEEPS)]
    max_sleeps: usize,

    /// Pre-allocate N instance slots (wasmtime's pooling allocator), and at most N live instances
    /// at once. Default: one slot per live instance the host can hold, when its memories are
    /// compact (as with the default --max-processes).
    #[arg(long, value_name = "N", conflicts_with = "on_demand")]
    pooling: Option<u32>,

    /// Map each instance's memory when it starts and unmap it when it goes, instead of reusing
    /// pooled slots.
    #[arg(long)]
    on_demand: bool,

    /// Reset a pooled slot in place when its instance goes, finding the pages it wrote with the
    /// kernel's page-map scan: several times faster spawning, but see SECURITY.md ("Reused
    /// memory") for when a process could read a page its slot's last process wrote.
    #[arg(long, conflicts_with = "on_demand")]
    page_scan_reset: bool,

    /// When a waiting process gives its instance back, keeping only what differs from a fresh
    /// one until its next event: when-full (above 7/8 of the instance capacity), always, or off.
    #[arg(long, value_name = "WHEN", default_value = "when-full", value_parser = parse_hibernation)]
    hibernate: Hibernation,

    /// Withdraw a built-in command (sleep, sleep-until, log, send, spawn, join, cancel, now,
    /// random) or a function (wfhost.http, a worker function) from the workflows; using it then
    /// fails with a not-allowed error. Repeatable.
    #[arg(long, value_name = "COMMAND|FUNCTION", value_parser = parse_denied)]
    deny: Vec<Denied>,

    /// Let the workflows cancel and join any workflow by its number, not only their own
    /// children: for supervisors whose code you trust. Without it, one workflow can neither stop
    /// another nor read its result.
    #[arg(long)]
    allow_any_process: bool,

    #[command(flatten)]
    act: super::outbound::ActArgs,
}

impl LimitArgs {
    /// The per-process and per-module limits.
    pub fn limits(&self) -> Limits {
        Limits::default()
            .max_memory_bytes(self.max_memory)
            .max_table_elements(self.max_table_elements)
            .max_memories(self.max_memories)
            .max_tables(self.max_tables)
            .step_time_limit(self.step_limit)
            .max_cpu_time(self.max_cpu.0)
            .fuel_per_step(self.fuel)
            .max_stack_bytes(self.max_stack)
            .max_yields_per_step(self.max_yields)
            .max_payload_bytes(self.max_payload)
            .max_output_bytes(self.max_output)
            .max_module_bytes(self.max_module_size)
            .compile_time_limit(self.compile_limit)
    }

    /// The builder with every limit applied.
    pub fn apply(&self, builder: HostBuilder) -> anyhow::Result<HostBuilder> {
        if self.max_processes == 0 {
            bail!("--max-processes must be at least 1");
        }
        let mut builder = builder
            .limits(self.limits())
            .max_processes(Some(self.max_processes))
            .max_children(Some(self.max_children))
            .mailbox_limit(Some(self.mailbox_limit))
            .mailbox_bytes(Some(self.mailbox_bytes))
            .max_sleeps(self.max_sleeps)
            .hibernation(self.hibernate);
        builder = self.act.apply(builder);
        if let Some(slots) = self.pooling {
            if slots == 0 {
                bail!("--pooling must be at least 1");
            }
            builder = builder.pooling(slots);
        }
        if self.on_demand {
            builder = builder.on_demand();
        }
        if self.page_scan_reset {
            builder = builder.page_scan_reset(true);
        }
        Ok(builder)
    }

    /// What every module loaded by this run may do.
    /// The largest module the host loads (--max-module-size).
    pub fn max_module_size(&self) -> usize {
        self.max_module_size
    }

    pub fn grants(&self) -> Grants {
        let granted = match self.allow_any_process {
            true => Grants::default().allow_any_process(),
            false => Grants::default(),
        };
        self.deny
            .iter()
            .fold(self.act.grant(granted), |grants, denied| match denied {
                Denied::Command(kind) => grants.deny(*kind),
                Denied::Function(name) => grants.deny_function(name.clone()),
            })
    }
}

fn parse_hibernation(text: &str) -> Result<Hibernation, String> {
    Hibernation::parse(text).ok_or_else(|| {
        format!("'{text}' is not a hibernation policy: use when-full, always or off")
    })
}

/// `--max-cpu`: a duration, or none.
#[derive(Clone, Copy, Debug)]
struct MaxCpu(Option<Duration>);

/// A duration, or "off" for none.
fn parse_max_cpu(text: &str) -> Result<MaxCpu, String> {
    match text.trim() {
        "off" | "none" => Ok(MaxCpu(None)),
        other => parse_duration(other).map(|d| MaxCpu(Some(d))),
    }
}

/// A built-in command by name.
/// What `--deny` withdraws.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Denied {
    /// A built-in command.
    Command(CommandKind),
    /// A function, by name.
    Function(String),
}

/// A built-in command's name, or else a function's (a name with a dot, such as
/// `payments.charge` or `wfhost.http`).
fn parse_denied(text: &str) -> Result<Denied, String> {
    let command = CommandKind::ALL
        .into_iter()
        .filter(|kind| !matches!(kind, CommandKind::Call | CommandKind::Forget))
        .find(|kind| kind.name() == text);
    match command {
        Some(kind) => Ok(Denied::Command(kind)),
        None if text.contains('.') && !text.contains(char::is_whitespace) => {
            Ok(Denied::Function(text.to_string()))
        }
        None => Err(format!(
            "'{text}' is neither a built-in command (sleep, sleep-until, log, send, spawn, join, \
             cancel, now, random) nor a function's name (which has a dot: payments.charge, \
             wfhost.http)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        limits: LimitArgs,
    }

    #[test]
    fn the_flags_default_to_the_library_defaults() {
        let cli = Cli::parse_from(["wfhost"]);
        assert_eq!(cli.limits.limits(), Limits::default());
        assert!(cli.limits.deny.is_empty());
    }

    #[test]
    fn cpu_limits_and_denials_parse() {
        assert_eq!(parse_max_cpu("off").unwrap().0, None);
        assert_eq!(
            parse_max_cpu("5m").unwrap().0,
            Some(Duration::from_secs(300))
        );
        assert_eq!(
            parse_denied("spawn"),
            Ok(Denied::Command(CommandKind::Spawn))
        );
        assert!(parse_denied("call").is_err());
        assert_eq!(
            parse_denied("payments.charge"),
            Ok(Denied::Function("payments.charge".into()))
        );
    }
}

/// Where compiled modules are kept between runs, so that running a module again does not compile
/// it again.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Module cache")]
pub struct CacheArgs {
    /// Keep compiled modules here. It must belong to you and be writable by nobody else (compiled
    /// code runs as native code); otherwise it is not used. Default: $XDG_CACHE_HOME/wfhost/modules
    /// or ~/.cache/wfhost/modules.
    #[arg(long, value_name = "DIR", env = "WFHOST_MODULE_CACHE")]
    module_cache: Option<PathBuf>,

    /// Compile every module afresh and keep nothing (whatever --module-cache or
    /// WFHOST_MODULE_CACHE say).
    #[arg(long)]
    no_module_cache: bool,
}

impl CacheArgs {
    /// The directory to use, if any.
    pub fn dir(&self) -> Option<PathBuf> {
        if self.no_module_cache {
            return None;
        }
        self.module_cache.clone().or_else(|| {
            let base = std::env::var_os("XDG_CACHE_HOME")
                .filter(|dir| !dir.is_empty())
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache"))
                })?;
            Some(base.join("wfhost").join("modules"))
        })
    }
}
