//! One file per subcommand.

mod build;
mod client;
mod durable;
mod history;
mod inspect;
mod limits;
mod run;
mod serve;

/// The subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    Build(build::BuildCommand),
    Run(Box<run::RunCommand>),
    Inspect(inspect::InspectCommand),
    Resume(Box<durable::ResumeCommand>),
    List(durable::ListCommand),
    History(history::HistoryCommand),
    Replay(durable::ReplayCommand),
    Serve(Box<serve::ServeCommand>),
    Start(client::StartCommand),
    Status(client::StatusCommand),
    Result(client::ResultCommand),
    Send(client::SendCommand),
    Cancel(client::CancelCommand),
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
            Command::Start(command) => command.execute(),
            Command::Status(command) => command.execute(),
            Command::Result(command) => command.execute(),
            Command::Send(command) => command.execute(),
            Command::Cancel(command) => command.execute(),
        }
    }
}

/// The workflow ran and failed (exit code 1, where every other error means it could not start).
#[derive(Debug)]
pub struct WorkflowFailed(pub String);

impl std::fmt::Display for WorkflowFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WorkflowFailed {}
