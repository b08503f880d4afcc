//! What the activity-worker tests share: JSON read back, and completions.

use serde_json::value::RawValue;
use serde_json::Value;
use wfhost_client::wire::{CompleteRequest, TaskErrorJson};

/// A payload the API showed, as a value.
pub fn result(raw: &RawValue) -> Value {
    serde_json::from_str(raw.get()).unwrap()
}

/// A completion with `value`.
pub fn ok(value: Value) -> CompleteRequest {
    CompleteRequest {
        result: Some(serde_json::value::to_raw_value(&value).unwrap()),
        error: None,
        next: None,
    }
}

/// A completion with a worker's error.
pub fn error(message: &str, retryable: bool) -> CompleteRequest {
    CompleteRequest {
        result: None,
        error: Some(TaskErrorJson {
            message: message.into(),
            retryable,
        }),
        next: None,
    }
}

/// How `function`'s workers and tasks stand, as the server behind `api` says.
pub fn tasks_of(
    api: &wfhost_client::Client,
    function: &str,
) -> wfhost_client::wire::FunctionWorkersJson {
    api.workers()
        .unwrap()
        .functions
        .into_iter()
        .find(|f| f.function == function)
        .unwrap_or_else(|| panic!("the server shows no function '{function}'"))
}
