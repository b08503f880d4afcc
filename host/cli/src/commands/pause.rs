//! `wfhost pause` and `wfhost unpause`: a running workflow held where it is, and let go again.

use wfhost::PauseChange;

/// Pauses a running workflow (on a store hosts share, or through a server): it takes no step
/// until `wfhost unpause`. Messages, timers that fire and answers wait for it meanwhile, and it
/// stays paused across restarts of its host.
#[derive(Debug, clap::Parser)]
pub struct PauseCommand {
    /// The workflow's id.
    id: String,

    #[command(flatten)]
    target: crate::args::target::Target,
}

/// Unpauses a paused workflow: it takes what waited for it, and goes on where it was.
#[derive(Debug, clap::Parser)]
pub struct UnpauseCommand {
    /// The workflow's id.
    id: String,

    #[command(flatten)]
    target: crate::args::target::Target,
}

impl PauseCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let change = self.target.client()?.pause(&self.id)?;
        say(&self.id, change, "paused");
        Ok(())
    }
}

impl UnpauseCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        let change = self.target.client()?.unpause(&self.id)?;
        say(&self.id, change, "unpaused");
        Ok(())
    }
}

fn say(id: &str, change: PauseChange, done: &str) {
    match change {
        PauseChange::Done => eprintln!("{id} {done}"),
        PauseChange::Already => eprintln!("{id} was {done} already"),
        PauseChange::Ended(state) => eprintln!("{id} has ended ({}): nothing to do", state.name()),
        _ => eprintln!("{id}: nothing to do"),
    }
}
