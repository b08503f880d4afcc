//! One file per subcommand. What several of them share is in `args/`; a subcommand never
//! imports another.

mod backup;
mod build;
mod cancel;
mod config;
mod deploy;
mod history;
mod inspect;
mod list;
mod modules;
mod pause;
mod prune;
mod replay;
mod reset;
mod result;
mod resume;
mod run;
mod schedule;
mod send;
mod serve;
mod start;
mod status;
mod types;
mod upgrade;
// Runs commands in process groups of their own.
#[cfg(unix)]
mod worker;
mod workers;

/// The subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    Build(build::BuildCommand),
    Run(Box<run::RunCommand>),
    Inspect(inspect::InspectCommand),
    Deploy(deploy::DeployCommand),
    Modules(modules::ModulesCommand),
    Resume(Box<resume::ResumeCommand>),
    List(list::ListCommand),
    History(history::HistoryCommand),
    Replay(replay::ReplayCommand),
    Serve(Box<serve::ServeCommand>),
    Backup(backup::BackupCommand),
    Start(start::StartCommand),
    Status(status::StatusCommand),
    Result(result::ResultCommand),
    Send(send::SendCommand),
    Cancel(cancel::CancelCommand),
    Pause(pause::PauseCommand),
    Unpause(pause::UnpauseCommand),
    Prune(prune::PruneCommand),
    Upgrade(upgrade::UpgradeCommand),
    Reset(reset::ResetCommand),
    Schedule(schedule::ScheduleCommand),
    Types(types::TypesCommand),
    #[cfg(unix)]
    Worker(worker::WorkerCommand),
    Workers(workers::WorkersCommand),
    Config(config::ConfigCommand),
}

/// `wfhost serve`'s arguments, for the settings of a configuration file.
pub(crate) fn serve_command() -> clap::Command {
    <serve::ServeCommand as clap::CommandFactory>::command()
}

/// Serve's settings from `args` (`serve`'s own, without the program's name; those of `file`
/// among them), checked as `wfhost serve` checks them before it serves: its settings in words.
pub(crate) fn check_serve(
    args: Vec<std::ffi::OsString>,
    file: &std::path::Path,
    from_file: &[String],
) -> anyhow::Result<String> {
    let refused = |e: clap::Error| crate::config::refused(file, &e);
    let matches = serve_command()
        .try_get_matches_from(args)
        .map_err(refused)?;
    let serve = <serve::ServeCommand as clap::FromArgMatches>::from_arg_matches(&matches)
        .map_err(refused)?;
    serve.check()?;
    Ok(crate::config::effective(
        &serve_command(),
        &matches,
        from_file,
    ))
}

impl Command {
    /// Says the settings `wfhost serve` runs with (`matches`: its own), when this is serve.
    pub fn describe(&mut self, matches: &clap::ArgMatches, from_file: &[String]) {
        if let Command::Serve(serve) = self {
            serve.describe(crate::config::effective(
                &serve_command(),
                matches,
                from_file,
            ));
        }
    }
}

impl Command {
    pub fn execute(self) -> anyhow::Result<()> {
        match self {
            Command::Build(command) => command.execute(),
            Command::Run(command) => command.execute(),
            Command::Inspect(command) => command.execute(),
            Command::Deploy(command) => command.execute(),
            Command::Modules(command) => command.execute(),
            Command::Resume(command) => command.execute(),
            Command::List(command) => command.execute(),
            Command::History(command) => command.execute(),
            Command::Replay(command) => command.execute(),
            Command::Serve(command) => command.execute(),
            Command::Backup(command) => command.execute(),
            Command::Start(command) => command.execute(),
            Command::Status(command) => command.execute(),
            Command::Result(command) => command.execute(),
            Command::Send(command) => command.execute(),
            Command::Cancel(command) => command.execute(),
            Command::Pause(command) => command.execute(),
            Command::Unpause(command) => command.execute(),
            Command::Prune(command) => command.execute(),
            Command::Upgrade(command) => command.execute(),
            Command::Reset(command) => command.execute(),
            Command::Schedule(command) => command.execute(),
            Command::Types(command) => command.execute(),
            #[cfg(unix)]
            Command::Worker(command) => command.execute(),
            Command::Workers(command) => command.execute(),
            Command::Config(command) => command.execute(),
        }
    }
}
