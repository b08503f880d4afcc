//! `wfhost modules`: the modules a store keeps, with their names and versions.

use crate::output::outln;

/// Lists the modules the store (or the server) keeps: each module's hash, size, the names and
/// versions it was stored under (`wfhost deploy --name`), and its entry points.
#[derive(Debug, clap::Parser)]
pub struct ModulesCommand {
    /// One JSON object per line.
    #[arg(long)]
    json: bool,

    #[command(flatten)]
    target: crate::args::target::Target,
}

impl ModulesCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let client = self.target.client()?;
        let mut modules = client.modules()?;
        // Named ones first, by name and version; then the others, by hash.
        modules.sort_by(|a, b| {
            let key = |m: &wfhost::StoredModule| {
                m.names
                    .iter()
                    .map(|n| (n.name.clone(), n.version))
                    .min()
                    .map_or((1, String::new(), 0), |(n, v)| (0, n, v))
            };
            key(a).cmp(&key(b)).then_with(|| a.hash.cmp(&b.hash))
        });
        for module in &modules {
            let names: Vec<String> = module.names.iter().map(ToString::to_string).collect();
            if self.json {
                outln!(
                    "{}",
                    serde_json::json!({
                        "hash": module.hash,
                        "size": module.size,
                        "names": module.names.iter().map(|n| serde_json::json!({
                            "name": n.name,
                            "version": n.version,
                        })).collect::<Vec<_>>(),
                        "entry_points": module.entry_points,
                    })
                )?;
            } else {
                outln!(
                    "{:<24} {}  {:>8.1} MiB  {}",
                    if names.is_empty() {
                        "-".to_string()
                    } else {
                        names.join(", ")
                    },
                    &module.hash[..12],
                    module.size as f64 / (1 << 20) as f64,
                    module.entry_points.join(", ")
                )?;
            }
        }
        Ok(())
    }
}
