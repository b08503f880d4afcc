//! `_wfhost`: the context's commands, in Rust, over the guest SDK. A command is started when
//! called (the SDK yields it to the host with the step); its result reaches Python when the
//! `_Pending` the `wfhost` module wraps around the returned handle is awaited (`drive.rs`).

use std::future::Future;

use rustpython_vm::{PyResult, VirtualMachine};

use crate::drive::{self, Outcome};
use crate::{values, with_vm};

/// Starts waiting for `future`, whose value `convert` makes Python's: the handle.
fn settle<T: 'static>(
    future: impl Future<Output = Result<T, wfguest::Error>> + 'static,
    convert: impl FnOnce(&VirtualMachine, T) -> PyResult + 'static,
) -> u64 {
    drive::pend(async move {
        let result = future.await;
        with_vm(|vm, wfhost| -> Outcome {
            match result {
                Ok(value) => convert(vm, value),
                Err(error) => Err(values::exception(vm, wfhost, error)),
            }
        })
    })
}

fn none(vm: &VirtualMachine, (): ()) -> PyResult {
    Ok(vm.ctx.none())
}

fn json(vm: &VirtualMachine, value: serde_json::Value) -> PyResult {
    values::to_python(vm, value)
}

fn seconds(vm: &VirtualMachine, seconds: f64) -> PyResult<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(seconds).map_err(|_| {
        vm.new_value_error(format!(
            "a duration is a number of seconds, 0 or more; {seconds} is not one"
        ))
    })
}

/// `n` bytes from WASI's `random_get`, which a durable host journals.
fn entropy_bytes<const N: usize>(vm: &VirtualMachine) -> PyResult<[u8; N]> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes)
        .map_err(|e| vm.new_os_error(format!("the host gave no randomness: {e}")))?;
    Ok(bytes)
}

#[rustpython_vm::pymodule]
pub(crate) mod _wfhost {
    use rustpython_vm::builtins::PyBytesRef;
    use rustpython_vm::{PyObjectRef, PyResult, VirtualMachine};
    use wfguest::{Header, HttpRequest, Level, Pid};

    use super::{entropy_bytes, json, none, seconds, settle};
    use crate::drive;
    use crate::values;

    #[pyfunction]
    fn check_entry_name(name: String, vm: &VirtualMachine) -> PyResult<()> {
        if wfcontract::manifest::is_entry_name(&name) {
            Ok(())
        } else {
            Err(vm.new_value_error(format!(
                "'{name}' cannot name an entry point: ASCII letters, digits, '_', '-' and '.', \
                 starting with a letter or '_'"
            )))
        }
    }

    #[pyfunction]
    fn sleep(duration: f64, vm: &VirtualMachine) -> PyResult<u64> {
        let duration = seconds(vm, duration)?;
        Ok(settle(drive::ctx(vm)?.sleep(duration), none))
    }

    /// The host's time in nanoseconds since the Unix epoch: WASI's clock, which a durable host
    /// journals.
    #[pyfunction]
    fn now_nanos(vm: &VirtualMachine) -> PyResult<u64> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map_err(|_| vm.new_os_error("the host's clock is before 1970"))?;
        Ok(u64::try_from(now.as_nanos()).unwrap_or(u64::MAX))
    }

    /// A float in [0, 1) from 53 journaled random bits.
    #[pyfunction]
    fn random(vm: &VirtualMachine) -> PyResult<f64> {
        let bits = u64::from_le_bytes(entropy_bytes::<8>(vm)?) >> 11;
        Ok(bits as f64 / (1u64 << 53) as f64)
    }

    /// 128 journaled random bits, to seed Python's `random` in each workflow.
    #[pyfunction]
    fn entropy(vm: &VirtualMachine) -> PyResult<PyObjectRef> {
        let bytes = entropy_bytes::<16>(vm)?;
        Ok(vm.ctx.new_int(u128::from_le_bytes(bytes)).into())
    }

    #[pyfunction]
    fn log(level: String, text: String, vm: &VirtualMachine) -> PyResult<()> {
        let level = match level.as_str() {
            "warn" => Level::Warn,
            _ => Level::Info,
        };
        drive::ctx(vm)?.log(level, text);
        Ok(())
    }

    #[pyfunction]
    fn send(to: u64, value: PyObjectRef, vm: &VirtualMachine) -> PyResult<u64> {
        let value = values::to_json(vm, &value)?;
        Ok(settle(drive::ctx(vm)?.send(Pid(to), &value), none))
    }

    #[pyfunction]
    fn recv(timeout: PyObjectRef, vm: &VirtualMachine) -> PyResult<u64> {
        let ctx = drive::ctx(vm)?;
        if vm.is_none(&timeout) {
            return Ok(settle(
                async move { ctx.recv::<serde_json::Value>().await },
                json,
            ));
        }
        let timeout = seconds(vm, timeout.try_into_value::<f64>(vm)?)?;
        Ok(settle(
            async move { ctx.recv_timeout::<serde_json::Value>(timeout).await },
            |vm, value| match value {
                Some(value) => json(vm, value),
                None => Ok(vm.ctx.none()),
            },
        ))
    }

    #[pyfunction]
    fn spawn(entry: String, input: PyObjectRef, vm: &VirtualMachine) -> PyResult<u64> {
        let input = values::to_json(vm, &input)?;
        Ok(settle(drive::ctx(vm)?.spawn(&entry, &input), |vm, pid| {
            Ok(vm.ctx.new_int(pid.0).into())
        }))
    }

    #[pyfunction]
    fn join(child: u64, vm: &VirtualMachine) -> PyResult<u64> {
        Ok(settle(
            drive::ctx(vm)?.join::<serde_json::Value>(Pid(child)),
            json,
        ))
    }

    #[pyfunction]
    fn cancel(child: u64, vm: &VirtualMachine) -> PyResult<u64> {
        Ok(settle(drive::ctx(vm)?.cancel(Pid(child)), none))
    }

    #[pyfunction]
    fn call(name: String, input: PyObjectRef, vm: &VirtualMachine) -> PyResult<u64> {
        let input = values::to_json(vm, &input)?;
        Ok(settle(
            drive::ctx(vm)?.call::<_, serde_json::Value>(&name, &input),
            json,
        ))
    }

    /// `head`: `{"method", "url", "headers": [[name, value], ...], "timeout": seconds or None}`.
    #[pyfunction]
    fn http(head: PyObjectRef, body: PyBytesRef, vm: &VirtualMachine) -> PyResult<u64> {
        #[derive(serde::Deserialize)]
        struct Head {
            method: String,
            url: String,
            headers: Vec<(String, String)>,
            timeout: Option<f64>,
        }
        let head: Head = serde_json::from_value(values::to_json(vm, &head)?)
            .map_err(|e| vm.new_type_error(format!("an HTTP request: {e}")))?;
        let timeout = head.timeout.map(|t| seconds(vm, t)).transpose()?;
        let mut request = HttpRequest::new(head.method, head.url);
        request.headers = head
            .headers
            .into_iter()
            .map(|(name, value)| Header { name, value })
            .collect();
        request.body = body.as_bytes().to_vec();
        request.timeout = timeout;
        Ok(settle(drive::ctx(vm)?.http(request), |vm, response| {
            let answer = vm.ctx.new_dict();
            answer.set_item("status", vm.ctx.new_int(response.status).into(), vm)?;
            let headers: Vec<PyObjectRef> = response
                .headers
                .into_iter()
                .map(|header| vm.new_tuple((header.name, header.value)).into())
                .collect();
            answer.set_item("headers", vm.ctx.new_list(headers).into(), vm)?;
            answer.set_item("body", vm.ctx.new_bytes(response.body).into(), vm)?;
            Ok(answer.into())
        }))
    }

    #[pyfunction]
    fn patched(change: String, vm: &VirtualMachine) -> PyResult<bool> {
        if change.len() > wfcontract::abi::MAX_PATCH_NAME {
            return Err(vm.new_value_error(format!(
                "a change id is at most {} bytes",
                wfcontract::abi::MAX_PATCH_NAME
            )));
        }
        Ok(drive::ctx(vm)?.patched(&change))
    }

    /// Abandons the command of a `_Pending` that was never awaited (its `__del__`).
    #[pyfunction]
    fn forget(handle: u64) {
        drive::forget(handle);
    }

    #[pyfunction]
    fn gather(awaitables: Vec<PyObjectRef>, vm: &VirtualMachine) -> PyResult<u64> {
        let pending = awaitables
            .iter()
            .map(|object| drive::awaited(vm, object))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(drive::pend(drive::gather(pending)))
    }

    #[pyfunction]
    fn select(awaitables: Vec<PyObjectRef>, vm: &VirtualMachine) -> PyResult<u64> {
        if awaitables.is_empty() {
            return Err(vm.new_value_error("wfhost.select needs something to wait for"));
        }
        let pending = awaitables
            .iter()
            .map(|object| drive::awaited(vm, object))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(drive::pend(drive::select(pending)))
    }
}
