//! `wfhost workers --server URL`: who serves each worker function, and how its tasks stand.

use crate::output::outln;

/// Shows, for each function workers serve, the workers polling the server for it (name,
/// machine, last poll), the tasks waiting for one and the oldest's age, the tasks in flight,
/// and the completions the server took. A function with tasks waiting and no pollers is one
/// nobody serves now. Through a server only (--server, or WFHOST_SERVER).
#[derive(Debug, clap::Parser)]
pub struct WorkersCommand {
    /// Print the server's JSON (`GET /v1/workers`).
    #[arg(long)]
    json: bool,

    #[command(flatten)]
    target: crate::args::target::Target,
}

impl WorkersCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let api = self.target.api("workers")?;
        let view = api.workers()?;
        if self.json {
            outln!("{}", serde_json::to_string_pretty(&view)?)?;
            return Ok(());
        }
        if view.functions.is_empty() {
            outln!("no worker functions (serve them with --worker-function NAME)")?;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        for function in &view.functions {
            let oldest = function
                .oldest_waiting_ms
                .map_or_else(String::new, |ms| format!(" (oldest {})", seconds(ms)));
            outln!(
                "{}: {} waiting{oldest}, {} in flight, {} completed, {} failed",
                function.function,
                function.waiting,
                function.in_flight,
                function.completed,
                function.failed
            )?;
            if function.pollers.is_empty() {
                outln!("  no worker polls for it")?;
            }
            for poller in &function.pollers {
                let when = if poller.polling {
                    "polling now".to_string()
                } else {
                    format!(
                        "last poll {} ago",
                        seconds(now.saturating_sub(poller.last_poll_ms))
                    )
                };
                outln!("  {} on {}: {when}", poller.name, poller.host)?;
            }
        }
        Ok(())
    }
}

/// `ms` as people say it: `850ms`, `12.3s`, `4m 05s`.
fn seconds(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{:.1}s", ms as f64 / 1000.0),
        _ => format!("{}m {:02}s", ms / 60_000, (ms % 60_000) / 1000),
    }
}
