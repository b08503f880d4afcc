//! Driving a workflow: its entry point's promise, and the promises of the commands it started.
//! A command starts when the context's method is called (as in the Rust SDK) and its promise
//! settles when the SDK's future for it completes; between completions the engine's jobs run
//! (promise reactions: `await`, `Promise.all`, `Promise.race`), in one deterministic order.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use boa_engine::builtins::promise::{PromiseState, ResolvingFunctions};
use boa_engine::object::builtins::JsArray;
use boa_engine::object::builtins::JsPromise;
use boa_engine::{js_error, Context, JsObject, JsResult, JsValue};

use crate::{engine, values, with_js, Loaded};

/// What a command comes to, made in the engine: the value to resolve its promise with, or the
/// error to reject it with.
type Settle = Box<dyn FnOnce(&mut Context, &Loaded) -> JsResult<JsValue>>;

/// A command in flight and the promise it settles.
struct Waiting {
    future: Pin<Box<dyn Future<Output = Settle>>>,
    /// The promise, for `ctx.select` to find the command by.
    promise: JsObject,
    resolvers: ResolvingFunctions,
}

thread_local! {
    /// The workflow's context (one workflow per instance).
    static CTX: RefCell<Option<wfguest::Ctx>> = const { RefCell::new(None) };
    /// Commands in flight, in the order they started.
    static WAITING: RefCell<Vec<Waiting>> = const { RefCell::new(Vec::new()) };
}

/// The workflow's context. Its commands are only reachable from a running workflow.
pub(crate) fn ctx() -> JsResult<wfguest::Ctx> {
    CTX.with(|ctx| ctx.borrow().clone())
        .ok_or_else(|| js_error!(Error: "wfhost's commands run only inside a workflow"))
}

/// Starts waiting for `future`, whose value `convert` makes JavaScript's: the promise it
/// settles.
pub(crate) fn promise<T: 'static>(
    future: impl Future<Output = Result<T, wfguest::Error>> + 'static,
    convert: impl FnOnce(&mut Context, T) -> JsResult<JsValue> + 'static,
    context: &mut Context,
) -> JsValue {
    let future = async move {
        let result = future.await;
        Box::new(
            move |context: &mut Context, loaded: &Loaded| -> JsResult<JsValue> {
                match result {
                    Ok(value) => convert(context, value),
                    Err(error) => Err(values::error(error, loaded, context)),
                }
            },
        ) as Settle
    };
    wait_for(Box::pin(future), context)
}

/// Keeps `future` in flight: the promise it settles.
fn wait_for(future: Pin<Box<dyn Future<Output = Settle>>>, context: &mut Context) -> JsValue {
    let (promise, resolvers) = JsPromise::new_pending(context);
    let object = JsObject::from(promise.clone());
    WAITING.with(|waiting| {
        waiting.borrow_mut().push(Waiting {
            future,
            promise: object,
            resolvers,
        })
    });
    promise.into()
}

/// `ctx.select(commands)`: the first of the commands (promises the context's methods
/// returned, not yet settled) to complete, as `[index, value]`, or its error; the others are
/// abandoned, as a Rust workflow's futures are when dropped (a `recv` leaves its message for the
/// next one, a `sleep`'s timer is dropped at the host). `Promise.race` cannot do that: a command
/// it lost keeps running.
pub(crate) fn select(commands: &[JsValue], context: &mut Context) -> JsResult<JsValue> {
    if commands.is_empty() {
        return Err(js_error!(TypeError: "ctx.select needs something to wait for"));
    }
    let mut taken = Vec::with_capacity(commands.len());
    for (index, command) in commands.iter().enumerate() {
        let found = command.as_object().and_then(|object| {
            WAITING.with(|waiting| {
                let mut waiting = waiting.borrow_mut();
                let at = waiting
                    .iter()
                    .position(|entry| JsObject::equals(&entry.promise, &object))?;
                Some(waiting.remove(at))
            })
        });
        match found {
            Some(entry) => taken.push(entry),
            None => {
                // Put back what was taken: the call changes nothing.
                WAITING.with(|waiting| waiting.borrow_mut().extend(taken));
                return Err(js_error!(
                    TypeError: "ctx.select takes commands still in flight (what ctx.sleep, \
                     ctx.recv, ctx.call, ctx.join, ... return, not yet awaited to their end); \
                     item {} is not one",
                    index
                ));
            }
        }
    }
    let future = async move {
        let (index, settle) = std::future::poll_fn(|cx| {
            for (index, entry) in taken.iter_mut().enumerate() {
                if let Poll::Ready(settle) = entry.future.as_mut().poll(cx) {
                    return Poll::Ready((index, settle));
                }
            }
            Poll::Pending
        })
        .await;
        let winner = taken.swap_remove(index).resolvers;
        // The losers' futures go with `taken`: abandoned.
        drop(taken);
        Box::new(
            move |context: &mut Context, loaded: &Loaded| -> JsResult<JsValue> {
                match settle(context, loaded) {
                    Ok(value) => {
                        // The command's own promise settles too, for whoever holds it.
                        let _ = winner.resolve.call(
                            &JsValue::undefined(),
                            std::slice::from_ref(&value),
                            context,
                        );
                        Ok(JsArray::from_iter([JsValue::new(index as f64), value], context).into())
                    }
                    Err(error) => {
                        let value = error.into_opaque(context)?;
                        let _ = winner.reject.call(
                            &JsValue::undefined(),
                            std::slice::from_ref(&value),
                            context,
                        );
                        Err(boa_engine::JsError::from_opaque(value))
                    }
                }
            },
        ) as Settle
    };
    Ok(wait_for(Box::pin(future), context))
}

/// Waits until at least one command completes, and settles the promises of those that did, in
/// the order they started.
async fn settle_completed() {
    let completed: Vec<(Settle, ResolvingFunctions)> = std::future::poll_fn(|cx| {
        let mut completed = Vec::new();
        WAITING.with(|waiting| {
            // The futures are the SDK's: polling one runs no JavaScript, which could start
            // another command while the table is lent.
            waiting
                .borrow_mut()
                .retain_mut(|entry| match entry.future.as_mut().poll(cx) {
                    Poll::Ready(settle) => {
                        completed.push((settle, entry.resolvers.clone()));
                        false
                    }
                    Poll::Pending => true,
                });
        });
        if completed.is_empty() {
            Poll::Pending
        } else {
            Poll::Ready(completed)
        }
    })
    .await;
    with_js(|context, loaded| {
        for (settle, promise) in completed {
            let (function, value) = match settle(context, loaded) {
                Ok(value) => (&promise.resolve, value),
                Err(error) => match error.into_opaque(context) {
                    Ok(value) => (&promise.reject, value),
                    // An error JavaScript cannot hold (none a command makes): nothing to settle.
                    Err(_) => continue,
                },
            };
            // The resolving functions of a pending promise cannot throw.
            let _ = function.call(&JsValue::undefined(), &[value], context);
        }
    });
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
    let outcome = drive(&name, pid, parent, input).await;
    // What is still in flight is abandoned, as a Rust workflow's futures are when it returns.
    let abandoned = WAITING.with(|waiting| std::mem::take(&mut *waiting.borrow_mut()));
    drop(abandoned);
    outcome
}

async fn drive(
    name: &str,
    pid: u64,
    parent: Option<u64>,
    input: serde_json::Value,
) -> Result<serde_json::Value, wfguest::Error> {
    engine::reseed().map_err(|error| wfguest::Error::msg(error.to_string()))?;
    let started = with_js(|context, loaded| -> JsResult<JsPromise> {
        let function = loaded
            .entries
            .get(name)
            .ok_or_else(|| js_error!(Error: "no entry point '{}'", name))?;
        let ctx = values::new_context(pid, parent, name, loaded, context)?;
        let input = values::to_js(&input, context)?;
        let returned = function.call(&JsValue::undefined(), &[ctx, input], context)?;
        returned
            .as_promise()
            .ok_or_else(|| js_error!(TypeError: "entry point '{}' returned no promise", name))
    });
    let promise = started.map_err(|error| with_js(|context, _| failure(&error, context)))?;
    loop {
        let state = with_js(|context, _| match context.run_jobs() {
            Ok(()) => Ok(promise.state()),
            Err(error) => Err(failure(&error, context)),
        })?;
        match state {
            PromiseState::Pending if WAITING.with(|waiting| waiting.borrow().is_empty()) => {
                // Nothing in flight can settle what it waits for: it would wait for ever, and a
                // cancel would find no command to end.
                return Err(wfguest::Error::msg(
                    "the workflow awaits a promise that nothing can settle: no command of the \
                     context is in flight (a workflow waits with ctx.sleep, ctx.recv, ctx.join, \
                     ctx.call, ...)",
                ));
            }
            PromiseState::Pending => settle_completed().await,
            PromiseState::Fulfilled(value) => {
                return with_js(|context, _| {
                    values::to_json(&value, context).map_err(|error| failure(&error, context))
                });
            }
            PromiseState::Rejected(error) => {
                return Err(with_js(|context, loaded| {
                    if values::is_cancelled(&error, loaded, context) {
                        wfguest::Error::Cancelled
                    } else {
                        wfguest::Error::msg(values::describe_value(&error, context))
                    }
                }));
            }
        }
    }
}

/// How a workflow that ended with `error` fails.
fn failure(error: &boa_engine::JsError, context: &mut Context) -> wfguest::Error {
    wfguest::Error::msg(values::describe(error, context))
}
