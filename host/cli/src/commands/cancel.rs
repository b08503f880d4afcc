//! `wfhost cancel`: a cancel asked of a running workflow on a store hosts share.

use wfhost::Cancelled;

/// Asks a running workflow (on a store hosts share, or through a server) to cancel; the host
/// that runs it delivers the cancel, and the workflow decides what to do (it may clean up
/// first).
#[derive(Debug, clap::Parser)]
pub struct CancelCommand {
    /// The workflow's id.
    id: String,

    #[command(flatten)]
    target: crate::args::target::Target,
}

impl CancelCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        match self.target.client()?.cancel(&self.id)? {
            Cancelled::Asked => eprintln!("asked {} to cancel", self.id),
            Cancelled::AskedBefore => eprintln!("{} was asked to cancel already", self.id),
            Cancelled::Ended(state) => eprintln!(
                "{} has ended ({}): nothing to cancel",
                self.id,
                state.name()
            ),
            _ => eprintln!("{}: nothing to do", self.id),
        }
        Ok(())
    }
}
