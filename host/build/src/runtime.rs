//! What every language's build does once its sources are gathered: runs the runtime's
//! initialization with them, reads its answer (the entry points, or why the code did not load),
//! and writes the manifest into the snapshot.

use crate::{manifest, preinit, BuildError, Built};

/// Initializes `runtime` (a module of `runtimes/`, for `language`) with `sources` on its stdin.
pub(crate) fn initialize(
    runtime: &[u8],
    language: &'static str,
    sources: serde_json::Value,
) -> Result<Built, BuildError> {
    let stdin = serde_json::to_vec(&sources).map_err(|e| BuildError::Sources(e.to_string()))?;
    let initialized = preinit::run(runtime, stdin)
        .map_err(|message| BuildError::Runtime { language, message })?;
    let answer: serde_json::Value = serde_json::from_slice(last_line(&initialized.stdout))
        .map_err(|_| BuildError::Runtime {
            language,
            message: format!(
                "it printed no answer. Its output:\n{}{}",
                String::from_utf8_lossy(&initialized.stdout),
                String::from_utf8_lossy(&initialized.stderr)
            ),
        })?;
    if let Some(error) = answer.get("error").and_then(|e| e.as_str()) {
        return Err(BuildError::Load(error.to_string()));
    }
    let entries: Vec<String> = answer
        .get("entries")
        .and_then(|entries| serde_json::from_value(entries.clone()).ok())
        .unwrap_or_default();
    let Some(mut module) = initialized.module else {
        return Err(BuildError::Runtime {
            language,
            message: "it exited without an answer".into(),
        });
    };
    manifest::write(&mut module, &entries);
    Ok(Built { module, entries })
}

/// The last line `output` holds (what a runtime answers with, after whatever the workflow's
/// top-level code printed).
fn last_line(output: &[u8]) -> &[u8] {
    let trimmed = output.strip_suffix(b"\n").unwrap_or(output);
    match trimmed.iter().rposition(|&b| b == b'\n') {
        Some(at) => &trimmed[at + 1..],
        None => trimmed,
    }
}
