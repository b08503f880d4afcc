//! One file per subcommand.

mod act;
mod backup;
mod build;
mod cancel;
mod durable;
mod history;
mod host;
mod http;
mod inspect;
mod limits;
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
mod target;
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
            #[cfg(unix)]
            Command::Worker(command) => command.execute(),
        }
    }
}

/// The exit code for `error` (see `wfhost --help`): 1 a workflow failed, 3 an id exists with
/// another start, 4 the store stopped the work (resumable), 5 damage in the store, 2 anything
/// else (it could not start).
pub fn exit_code(error: &anyhow::Error) -> u8 {
    if error.downcast_ref::<WorkflowFailed>().is_some() {
        return 1;
    }
    if error.downcast_ref::<Stopped>().is_some() {
        return 4;
    }
    if error.downcast_ref::<Damaged>().is_some() {
        return 5;
    }
    match error
        .downcast_ref::<wfhost::Error>()
        .map(wfhost::Error::kind)
    {
        Some(wfhost::ErrorKind::Conflict) => 3,
        Some(wfhost::ErrorKind::Damaged) => 5,
        _ => 2,
    }
}

/// The store stopped the work where its journal ends (full, read-only, out of reach): it resumes
/// on a host started on a working store (exit code 4).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Stopped(pub String);

/// A journal in the store cannot be read back: the workflows it holds were left as they were
/// (exit code 5).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Damaged(pub String);

/// The workflow ran and failed (exit code 1, where every other error means it could not start).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct WorkflowFailed(pub String);
