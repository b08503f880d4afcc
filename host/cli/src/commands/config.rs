//! `wfhost config check FILE`: a configuration file of `wfhost serve --config`, checked without
//! serving.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::output::outln;

/// Configuration files of `wfhost serve --config`.
#[derive(Debug, clap::Parser)]
pub struct ConfigCommand {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Checks a configuration file without serving: every key is one of serve's flags, every
    /// value one its flag takes, the settings agree (as --worker-function needs --http), and the
    /// token and TLS files can be read. Prints the settings serve would run with, and where each
    /// comes from (the file, the environment, which wins over it). Exit code 2 when it is wrong.
    Check {
        /// The file (TOML).
        file: PathBuf,
    },
}

impl ConfigCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let Action::Check { file } = self.action;
        let args: Vec<OsString> = vec![
            "wfhost".into(),
            "serve".into(),
            "--config".into(),
            file.clone().into_os_string(),
        ];
        let expanded = crate::config::expand(args)?;
        let serve = expanded.args[1..].to_vec();
        let settings = super::check_serve(serve, &file, &expanded.from_file)?;
        outln!("{}: ok", file.display())?;
        for setting in settings.split(", ").filter(|s| !s.is_empty()) {
            outln!("  {setting}")?;
        }
        Ok(())
    }
}
