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
