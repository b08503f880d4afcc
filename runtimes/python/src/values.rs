//! Values between Python and the host: JSON both ways, the SDK's errors as Python exceptions,
//! and Python exceptions as the text a failed workflow ends with.

use rustpython_vm::builtins::{PyBaseExceptionRef, PyTypeRef};
use rustpython_vm::py_serde::{PyObjectDeserializer, PyObjectSerializer};
use rustpython_vm::{AsObject, PyObjectRef, PyResult, VirtualMachine};
use serde::de::DeserializeSeed;

/// A JSON value as a Python object (dict, list, str, int, float, bool or None).
pub(crate) fn to_python(vm: &VirtualMachine, value: serde_json::Value) -> PyResult {
    PyObjectDeserializer::new(vm)
        .deserialize(value)
        .map_err(|e| vm.new_value_error(format!("a value from the host does not read: {e}")))
}

/// A Python object as JSON: what `json.dumps` accepts (dict with str keys, list, tuple, str,
/// int, float, bool, None). Anything else is a `TypeError` that names it.
pub(crate) fn to_json(vm: &VirtualMachine, object: &PyObjectRef) -> PyResult<serde_json::Value> {
    serde_json::to_value(PyObjectSerializer::new(vm, object)).map_err(|e| {
        vm.new_type_error(format!(
            "a workflow's values are JSON (dict, list, str, int, float, bool, None): {e}"
        ))
    })
}

/// The `wfhost` class `name` (`Cancelled`, `CommandError`).
fn class(vm: &VirtualMachine, wfhost: &PyObjectRef, name: &'static str) -> PyResult<PyTypeRef> {
    wfhost
        .get_attr(name, vm)?
        .downcast()
        .map_err(|_| vm.new_runtime_error(format!("wfhost.{name} is not a class")))
}

/// The Python exception for an SDK error: `wfhost.Cancelled` for a cancel, `wfhost.CommandError`
/// with the host's kind and message otherwise.
pub(crate) fn exception(
    vm: &VirtualMachine,
    wfhost: &PyObjectRef,
    error: wfguest::Error,
) -> PyBaseExceptionRef {
    let made = (|| -> PyResult<PyBaseExceptionRef> {
        if error.is_cancelled() {
            let class = class(vm, wfhost, "Cancelled")?;
            return Ok(vm.new_exception_msg(class, "the workflow was cancelled".into()));
        }
        let kind = error
            .kind()
            .map_or_else(|| "failed".to_string(), |kind| kind.name().to_string());
        let message = match &error {
            wfguest::Error::Command(command) => command.message.clone(),
            other => other.to_string(),
        };
        // Called, not only allocated, so that its `__init__` sets `kind` and `message`.
        let made = class(vm, wfhost, "CommandError")?
            .as_object()
            .call((vm.ctx.new_str(kind), vm.ctx.new_str(message)), vm)?;
        made.downcast()
            .map_err(|_| vm.new_type_error("wfhost.CommandError is not an exception"))
    })();
    made.unwrap_or_else(|e| e)
}

/// Whether `exception` is a `wfhost.Cancelled`.
pub(crate) fn is_cancelled(
    vm: &VirtualMachine,
    wfhost: &PyObjectRef,
    exception: &PyBaseExceptionRef,
) -> bool {
    class(vm, wfhost, "Cancelled").is_ok_and(|class| exception.fast_isinstance(&class))
}

/// The exception as Python prints it: the traceback and the message.
pub(crate) fn traceback(vm: &VirtualMachine, exception: &PyBaseExceptionRef) -> String {
    let mut text = String::new();
    if vm.write_exception(&mut text, exception).is_err() {
        text = "an exception that could not be written".to_string();
    }
    text.trim_end().to_string()
}
