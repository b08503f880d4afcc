//! `wfhost cancel`: a cancel asked of a running workflow on a store hosts share.

use wfhost::store::Location;
use wfhost::{Cancelled, Client};

/// Asks a running workflow on a store hosts share to cancel; the host that runs it delivers the
/// cancel, and the workflow decides what to do (it may clean up first).
#[derive(Debug, clap::Parser)]
pub struct CancelCommand {
    /// The workflow's id.
    id: String,

    /// The store: a PostgreSQL URL that `wfhost serve` hosts share.
    #[arg(long, value_name = "STORE", env = "WFHOST_STORE")]
    store: Location,
}

impl CancelCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        match Client::open(&self.store).cancel(&self.id)? {
            Cancelled::Asked => eprintln!("asked {} to cancel", self.id),
            Cancelled::AskedBefore => eprintln!("{} was asked to cancel already", self.id),
            Cancelled::Ended(state) => eprintln!(
                "{} has ended ({}): nothing to cancel",
                self.id,
                super::durable::state_word(state)
            ),
            _ => eprintln!("{}: nothing to do", self.id),
        }
        Ok(())
    }
}
