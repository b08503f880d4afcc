//! One file per subcommand. What several of them share is in `args/`; a subcommand never
//! imports another.

mod backup;
mod build;
mod cancel;
mod history;
mod inspect;
mod list;
mod pause;
mod prune;
mod replay;
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

/// The subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    Build(build::BuildCommand),
    Run(Box<run::RunCommand>),
    Inspect(inspect::InspectCommand),
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
    Schedule(schedule::ScheduleCommand),
    Types(types::TypesCommand),
    #[cfg(unix)]
    Worker(worker::WorkerCommand),
}

impl Command {
    pub fn execute(self) -> anyhow::Result<()> {
        match self {
            Command::Build(command) => command.execute(),
            Command::Run(command) => command.execute(),
            Command::Inspect(command) => command.execute(),
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
            Command::Schedule(command) => command.execute(),
            Command::Types(command) => command.execute(),
            #[cfg(unix)]
            Command::Worker(command) => command.execute(),
        }
    }
}
