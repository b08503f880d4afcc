//! Driving a workflow's coroutines: each is a Rust future that sends values into the coroutine
//! and, when it yields one of the context's commands (a `wfhost._Pending`), awaits the SDK's
//! future for that command. Commands start when the context's method is called (as in the Rust
//! SDK), so awaiting several, or `wfhost.gather`, runs them at once.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use rustpython_vm::builtins::{PyBaseExceptionRef, PyCoroutine};
use rustpython_vm::protocol::PyIterReturn;
use rustpython_vm::{AsObject, PyObjectRef, PyResult, VirtualMachine};

use crate::{values, with_vm};

/// What a command, or a coroutine, comes to: a value, or the exception to raise.
pub(crate) type Outcome = Result<PyObjectRef, PyBaseExceptionRef>;

/// A command or coroutine in flight.
pub(crate) type Pending = Pin<Box<dyn Future<Output = Outcome>>>;

thread_local! {
    /// The coroutines being driven, by address: one is driven once.
    static DRIVEN: RefCell<HashSet<usize>> = RefCell::new(HashSet::new());
    /// The workflow's context (one workflow per instance).
    static CTX: RefCell<Option<wfguest::Ctx>> = const { RefCell::new(None) };
    /// Commands started and not yet awaited, by the handle their `_Pending` holds.
    static PENDING: RefCell<HashMap<u64, Pending>> = RefCell::new(HashMap::new());
    static NEXT: Cell<u64> = const { Cell::new(1) };
}

/// The workflow's context. Its commands are only reachable from a running workflow.
pub(crate) fn ctx(vm: &VirtualMachine) -> PyResult<wfguest::Ctx> {
    CTX.with(|ctx| ctx.borrow().clone())
        .ok_or_else(|| vm.new_runtime_error("wfhost's commands run only inside a workflow"))
}

/// Keeps `future` until its `_Pending` is awaited: the handle.
pub(crate) fn pend(future: impl Future<Output = Outcome> + 'static) -> u64 {
    let handle = NEXT.with(|next| {
        let handle = next.get();
        next.set(handle + 1);
        handle
    });
    PENDING.with(|pending| pending.borrow_mut().insert(handle, Box::pin(future)));
    handle
}

/// Drops the command of handle `handle`, if it was never awaited: the SDK abandons it.
pub(crate) fn forget(handle: u64) {
    // Taken out first and dropped after the table is free again: dropping it may run Python
    // (a coroutine closed), which may forget more.
    let abandoned = PENDING.with(|pending| pending.borrow_mut().remove(&handle));
    drop(abandoned);
}

/// What awaiting `object` waits for: the command of a `_Pending`, or a coroutine driven here.
pub(crate) fn awaited(
    vm: &VirtualMachine,
    object: &PyObjectRef,
) -> Result<Pending, PyBaseExceptionRef> {
    if object.downcast_ref::<PyCoroutine>().is_some() {
        let address = object.as_object() as *const _ as *const u8 as usize;
        if DRIVEN.with(|driven| driven.borrow().contains(&address)) {
            return Err(vm.new_runtime_error(
                "this coroutine is awaited already: await each coroutine once",
            ));
        }
        return Ok(drive(object.clone()));
    }
    let handle = object
        .get_attr("_id", vm)
        .ok()
        .and_then(|handle| handle.try_into_value::<u64>(vm).ok())
        .ok_or_else(|| {
            vm.new_type_error(format!(
                "a workflow awaits only the context's commands (ctx.sleep, ctx.call, ...), \
                 wfhost.gather and wfhost.select, and its own coroutines; it awaited {}",
                object.class().name()
            ))
        })?;
    PENDING
        .with(|pending| pending.borrow_mut().remove(&handle))
        .ok_or_else(|| vm.new_runtime_error("this command was awaited already: await it once"))
}

/// Sends `input` into `coroutine`: what it yielded, its return value, or what it raised.
enum Resumed {
    Yielded(PyObjectRef),
    Returned(PyObjectRef),
    Raised(PyBaseExceptionRef),
}

fn resume(vm: &VirtualMachine, coroutine: &PyObjectRef, input: Outcome) -> Resumed {
    let Some(native) = coroutine.downcast_ref::<PyCoroutine>() else {
        return Resumed::Raised(vm.new_type_error("an entry point must be an 'async def'"));
    };
    let result = match input {
        Ok(value) => native.as_coro().send(coroutine, value, vm),
        Err(exception) => native.as_coro().throw(
            coroutine,
            exception.into(),
            vm.ctx.none(),
            vm.ctx.none(),
            vm,
        ),
    };
    match result {
        Ok(PyIterReturn::Return(yielded)) => Resumed::Yielded(yielded),
        Ok(PyIterReturn::StopIteration(value)) => {
            Resumed::Returned(value.unwrap_or_else(|| vm.ctx.none()))
        }
        Err(exception) => Resumed::Raised(exception),
    }
}

/// A coroutine being driven: closed (`GeneratorExit` at its await, so its `finally` blocks run)
/// if its driver is dropped before it ended, as when a `select` it lost or a `gather` that
/// failed abandons it.
struct Driven {
    coroutine: PyObjectRef,
    address: usize,
    ended: bool,
}

impl Driven {
    fn new(coroutine: PyObjectRef) -> Driven {
        let address = coroutine.as_object() as *const _ as *const u8 as usize;
        DRIVEN.with(|driven| driven.borrow_mut().insert(address));
        Driven {
            coroutine,
            address,
            ended: false,
        }
    }

    /// It ended: nothing to close.
    fn end(&mut self) {
        self.ended = true;
    }
}

impl Drop for Driven {
    fn drop(&mut self) {
        DRIVEN.with(|driven| driven.borrow_mut().remove(&self.address));
        if !self.ended {
            with_vm(|vm, _| {
                let _ = vm.call_method(&self.coroutine, "close", ());
            });
        }
    }
}

/// Drives `coroutine` to its end.
pub(crate) fn drive(coroutine: PyObjectRef) -> Pending {
    let mut driven = Driven::new(coroutine);
    Box::pin(async move {
        let mut input: Outcome = with_vm(|vm, _| Ok(vm.ctx.none()));
        loop {
            let resumed = with_vm(|vm, _| resume(vm, &driven.coroutine, input));
            input = match resumed {
                Resumed::Returned(value) => {
                    driven.end();
                    return Ok(value);
                }
                Resumed::Raised(exception) => {
                    driven.end();
                    return Err(exception);
                }
                Resumed::Yielded(yielded) => match with_vm(|vm, _| awaited(vm, &yielded)) {
                    Ok(pending) => pending.await,
                    Err(exception) => Err(exception),
                },
            };
        }
    })
}

/// Every one of `pending`, at once: their values in order, or the first exception raised.
pub(crate) async fn gather(mut pending: Vec<Pending>) -> Outcome {
    let mut done: Vec<Option<PyObjectRef>> = vec![None; pending.len()];
    std::future::poll_fn(|cx| {
        let mut waiting = false;
        for (future, slot) in pending.iter_mut().zip(done.iter_mut()) {
            if slot.is_some() {
                continue;
            }
            match future.as_mut().poll(cx) {
                Poll::Ready(Ok(value)) => *slot = Some(value),
                Poll::Ready(Err(exception)) => return Poll::Ready(Err(exception)),
                Poll::Pending => waiting = true,
            }
        }
        if waiting {
            Poll::Pending
        } else {
            Poll::Ready(Ok(()))
        }
    })
    .await?;
    let values: Vec<PyObjectRef> = done.into_iter().flatten().collect();
    with_vm(|vm, _| Ok(vm.ctx.new_list(values).into()))
}

/// The first of `pending` to end: `(index, value)`, or its exception.
pub(crate) async fn select(mut pending: Vec<Pending>) -> Outcome {
    let (index, outcome) = std::future::poll_fn(|cx| {
        for (index, future) in pending.iter_mut().enumerate() {
            if let Poll::Ready(outcome) = future.as_mut().poll(cx) {
                return Poll::Ready((index, outcome));
            }
        }
        Poll::Pending
    })
    .await;
    let value = outcome?;
    with_vm(|vm, _| Ok(vm.new_tuple((index, value)).into()))
}

/// Runs entry point `name` of the workflow with `input`, to its end.
pub(crate) async fn run(
    name: String,
    ctx: wfguest::Ctx,
    input: serde_json::Value,
) -> Result<serde_json::Value, wfguest::Error> {
    let pid = ctx.pid().0;
    let parent = ctx.parent().map(|parent| parent.0);
    CTX.with(|slot| *slot.borrow_mut() = Some(ctx));
    let started = with_vm(|vm, wfhost| -> PyResult {
        let value = values::to_python(vm, input)?;
        vm.call_method(
            wfhost,
            "_start",
            (vm.ctx.new_str(name.as_str()), pid, parent, value),
        )
    });
    let outcome = match started {
        Ok(coroutine) => drive(coroutine).await,
        Err(exception) => Err(exception),
    };
    with_vm(|vm, wfhost| match outcome {
        Ok(value) => values::to_json(vm, &value)
            .map_err(|exception| wfguest::Error::msg(values::traceback(vm, &exception))),
        Err(exception) if values::is_cancelled(vm, wfhost, &exception) => {
            Err(wfguest::Error::Cancelled)
        }
        Err(exception) => Err(wfguest::Error::msg(values::traceback(vm, &exception))),
    })
}
