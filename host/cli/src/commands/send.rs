//! `wfhost send`: a message to a running workflow on a store hosts share.

use anyhow::bail;
use wfhost::Payload;

use crate::output::outln;

/// Sends a message (JSON) to a running workflow, on a store hosts share or through a server;
/// the host that runs it delivers it. Prints the message's number.
#[derive(Debug, clap::Parser)]
pub struct SendCommand {
    /// The workflow's id.
    id: String,

    /// The message, as JSON.
    message: String,

    #[command(flatten)]
    target: crate::args::target::Target,
}

impl SendCommand {
    pub fn execute(self) -> anyhow::Result<()> {
        if let Err(error) = serde_json::from_str::<serde_json::Value>(&self.message) {
            bail!("the message is not valid JSON: {error} (strings need quotes: '\"hi\"')");
        }
        let client = self.target.client()?;
        let number = client.send(&self.id, &Payload::json_bytes(self.message.into_bytes()))?;
        outln!("{number}")?;
        Ok(())
    }
}
