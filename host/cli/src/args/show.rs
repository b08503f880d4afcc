//! How the commands show what they read: a result as JSON text, a status in a word, a time.

use anyhow::Context as _;
use wfhost::{Encoding, Payload, WorkflowStatus};

/// The result as JSON text.
pub fn render(result: &Payload) -> anyhow::Result<String> {
    match result.encoding {
        Encoding::Json => String::from_utf8(result.bytes.to_vec())
            .context("the workflow returned JSON that is not UTF-8"),
        encoding => {
            let hex: String = result.bytes.iter().map(|b| format!("{b:02x}")).collect();
            Ok(serde_json::json!({ "encoding": encoding.name(), "bytes": hex }).to_string())
        }
    }
}

/// A workflow's status in a word, as everything else says it: `running`, `paused`, `damaged`,
/// `completed`, `failed` or `cancelled`.
pub fn status_word(workflow: &WorkflowStatus) -> &'static str {
    workflow.state.name()
}

/// Milliseconds since the Unix epoch, as UTC "YYYY-MM-DD hh:mm:ss.mmm".
pub fn time(millis: u64) -> String {
    wfhost::utc_time(millis)
}
