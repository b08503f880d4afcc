//! Values between JavaScript and the host: JSON both ways, the SDK's errors as the `wfhost`
//! module's errors, and thrown values as the text a failed workflow ends with.

use boa_engine::{js_error, js_string, Context, JsError, JsResult, JsValue};

use crate::{wfhost_class, Loaded};

/// A JSON value as JavaScript's.
pub(crate) fn to_js(value: &serde_json::Value, context: &mut Context) -> JsResult<JsValue> {
    JsValue::from_json(value, context)
}

/// A JavaScript value as JSON, as `JSON.stringify` writes it (`toJSON`, getters, dates; what
/// it leaves out, `undefined` or a function, is `null`). What it cannot write (a cycle, a
/// BigInt) or JSON nested deeper than 128 levels is a `TypeError` that says so.
pub(crate) fn to_json(value: &JsValue, context: &mut Context) -> JsResult<serde_json::Value> {
    let text = match crate::engine::stringify(value, context) {
        Ok(text) => text,
        Err(error) => {
            let said = describe(&error, context);
            return Err(js_error!(
                TypeError: "a workflow's values are JSON (objects, arrays, strings, numbers, \
                 booleans, null): {}",
                said
            ));
        }
    };
    let Some(text) = text else {
        return Ok(serde_json::Value::Null);
    };
    serde_json::from_str(&text).map_err(|error| {
        js_error!(
            TypeError: "a workflow's values are JSON of at most 128 levels: {}",
            error
        )
    })
}

/// A new `Context` of the `wfhost` module.
pub(crate) fn new_context(
    pid: u64,
    parent: Option<u64>,
    entry: &str,
    loaded: &Loaded,
    context: &mut Context,
) -> JsResult<JsValue> {
    let class = wfhost_class(loaded, "Context", context)
        .ok_or_else(|| js_error!(Error: "the wfhost module has no Context"))?;
    let parent = parent.map_or(JsValue::null(), |parent| JsValue::new(parent as f64));
    let made = class.construct(
        &[
            JsValue::new(pid as f64),
            parent,
            JsValue::new(js_string!(entry)),
        ],
        None,
        context,
    )?;
    Ok(made.into())
}

/// The JavaScript error for an SDK error: a `Cancelled` for a cancel, a `CommandError` with the
/// host's kind and message otherwise.
pub(crate) fn error(error: wfguest::Error, loaded: &Loaded, context: &mut Context) -> JsError {
    let made = (|| -> JsResult<JsValue> {
        if error.is_cancelled() {
            let class = wfhost_class(loaded, "Cancelled", context)
                .ok_or_else(|| js_error!(Error: "the workflow was cancelled"))?;
            return Ok(class.construct(&[], None, context)?.into());
        }
        let kind = error
            .kind()
            .map_or_else(|| "failed".to_string(), |kind| kind.name().to_string());
        let message = match &error {
            wfguest::Error::Command(command) => command.message.clone(),
            other => other.to_string(),
        };
        let class = wfhost_class(loaded, "CommandError", context)
            .ok_or_else(|| js_error!(Error: "{}: {}", kind, message))?;
        Ok(class
            .construct(
                &[
                    JsValue::new(js_string!(kind.as_str())),
                    JsValue::new(js_string!(message.as_str())),
                ],
                None,
                context,
            )?
            .into())
    })();
    match made {
        Ok(value) => JsError::from_opaque(value),
        Err(error) => error,
    }
}

/// Whether `value` is a `Cancelled`.
pub(crate) fn is_cancelled(value: &JsValue, loaded: &Loaded, context: &mut Context) -> bool {
    wfhost_class(loaded, "Cancelled", context)
        .is_some_and(|class| value.instance_of(&class.into(), context).unwrap_or(false))
}

/// An error as the workflow's failure says it: its stack (which begins with its name and
/// message) when it has one.
pub(crate) fn describe(error: &JsError, context: &mut Context) -> String {
    match error.clone().into_opaque(context) {
        Ok(value) => describe_value(&value, context),
        // One JavaScript cannot catch (a runtime limit): as the engine writes it.
        Err(_) => shorten(error.to_string().trim_end()),
    }
}

/// A thrown value as the workflow's failure says it.
pub(crate) fn describe_value(value: &JsValue, context: &mut Context) -> String {
    if let Some(object) = value.as_object() {
        if object.is::<boa_engine::builtins::error::Error>() {
            let field = |name, context: &mut Context| {
                object
                    .get(js_string!(name), context)
                    .ok()
                    .filter(|value| !value.is_undefined())
                    .and_then(|value| value.to_string(context).ok())
                    .map(|text| text.to_std_string_escaped())
            };
            let name = field("name", context).unwrap_or_else(|| "Error".into());
            let message = field("message", context).unwrap_or_default();
            let head = if message.is_empty() {
                name
            } else {
                format!("{name}: {message}")
            };
            return match field("stack", context) {
                Some(stack) if !stack.trim().is_empty() => {
                    let stack = shorten(stack.trim_end());
                    if stack.starts_with(&head) {
                        stack
                    } else {
                        format!("{head}\n{stack}")
                    }
                }
                _ => head,
            };
        }
    }
    match value.to_string(context) {
        Ok(text) => format!("uncaught {}", text.to_std_string_escaped()),
        Err(_) => "an uncaught value that cannot be written".to_string(),
    }
}

/// The most lines of a stack a failure keeps.
const STACK_LINES: usize = 24;

/// `stack`, its lines past [`STACK_LINES`] counted rather than kept (a runaway recursion has
/// thousands).
fn shorten(stack: &str) -> String {
    let lines: Vec<&str> = stack.lines().collect();
    if lines.len() <= STACK_LINES {
        return stack.to_string();
    }
    format!(
        "{}\n    ... {} more",
        lines[..STACK_LINES].join("\n"),
        lines.len() - STACK_LINES
    )
}
