//! The engine a workflow runs in: Boa with the host's journaled clock, no time zone but UTC, its
//! own job queue (promise jobs only: no timers), `Math.random` drawn from journaled entropy, and
//! the globals a workflow may expect (`console`, `crypto.getRandomValues`, `TextEncoder`, ...)
//! made over the host's services (`prelude.js`). What would read the machine outside the journal
//! or depend on the collector's timing (`WeakRef`, `FinalizationRegistry`, `Atomics.wait`) is
//! not there.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::path::Path;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use boa_engine::context::time::JsInstant;
use boa_engine::context::{Clock, HostHooks};
use boa_engine::job::{Job, JobExecutor};
use boa_engine::{
    js_error, js_string, Context, JsObject, JsResult, JsValue, NativeFunction, Script, Source,
};
use rand::rngs::SmallRng;
use rand::{RngExt as _, SeedableRng as _};

use crate::loader::Loader;
use crate::native;

/// The globals made over the host's services.
const PRELUDE: &str = include_str!("../js/prelude.js");

/// The deepest a workflow's calls may go.
const RECURSION_LIMIT: usize = 10_000;

/// The most values the engine's stack may hold (Boa's default, 10,240, ends a recursion of a
/// few hundred calls).
const STACK_LIMIT: usize = 1 << 20;

thread_local! {
    /// `Math.random`'s generator: seeded from journaled entropy when each workflow starts.
    static RANDOM: RefCell<SmallRng> = RefCell::new(SmallRng::from_seed([0; 32]));
    /// The time the step began, once read.
    static STEP_TIME: Cell<Option<Duration>> = const { Cell::new(None) };
    /// `JSON.stringify` as the engine made it (a workflow may replace the global).
    static STRINGIFY: RefCell<Option<JsObject>> = const { RefCell::new(None) };
}

/// A new step begins: the clock is read again when next asked.
pub(crate) fn new_step() {
    STEP_TIME.with(|time| time.set(None));
}

/// The time the current step began, since the Unix epoch: WASI's wall clock (which a durable
/// host journals), read once a step. Every `Date.now()`, `new Date()` and `ctx.now()` of a
/// step gives it, as a Temporal workflow's clock does, so that a step reads the clock once
/// however often the code asks (and adding a log line that prints the date does not shift the
/// journal's reads).
pub(crate) fn step_time() -> Duration {
    STEP_TIME.with(|time| {
        *time.get().get_or_insert_with(|| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::SystemTime::UNIX_EPOCH)
                .unwrap_or_default();
            time.set(Some(now));
            now
        })
    })
}

/// The host's clock for `Date`: the step's time.
struct HostClock;

impl Clock for HostClock {
    fn now(&self) -> JsInstant {
        let now = step_time();
        JsInstant::new(now.as_secs(), now.subsec_nanos())
    }

    fn system_time_millis(&self) -> i64 {
        i64::try_from(step_time().as_millis()).unwrap_or(i64::MAX)
    }
}

/// `value` as `JSON.stringify` writes it (`None` for what it leaves out: `undefined`, a
/// function).
pub(crate) fn stringify(value: &JsValue, context: &mut Context) -> JsResult<Option<String>> {
    let function = STRINGIFY
        .with(|stringify| stringify.borrow().clone())
        .ok_or_else(|| js_error!(Error: "no JSON.stringify"))?;
    let text = function.call(&JsValue::undefined(), std::slice::from_ref(value), context)?;
    if text.is_undefined() {
        return Ok(None);
    }
    Ok(Some(text.to_string(context)?.to_std_string_escaped()))
}

/// Every workflow runs in UTC: the host's time zone is not the workflow's to read.
struct Hooks;

impl HostHooks for Hooks {
    fn local_timezone_offset_seconds(&self, _unix_time_seconds: i64) -> i32 {
        0
    }
}

/// The job queue: promise jobs, in order. Nothing here waits on a timer (there are none) or on
/// the machine; a module load's job completes when first polled.
#[derive(Default)]
struct Jobs {
    queue: RefCell<VecDeque<Job>>,
}

impl JobExecutor for Jobs {
    fn enqueue_job(self: Rc<Self>, job: Job, _context: &mut Context) {
        self.queue.borrow_mut().push_back(job);
    }

    fn run_jobs(self: Rc<Self>, context: &mut Context) -> JsResult<()> {
        loop {
            let Some(job) = self.queue.borrow_mut().pop_front() else {
                return Ok(());
            };
            match job {
                Job::PromiseJob(job) => {
                    job.call(context)?;
                }
                Job::GenericJob(job) => {
                    job.call(context)?;
                }
                Job::AsyncJob(job) => {
                    let cell = RefCell::new(&mut *context);
                    let mut future = job.call(&cell);
                    let mut waker = std::task::Context::from_waker(std::task::Waker::noop());
                    match std::pin::Pin::new(&mut future).poll(&mut waker) {
                        Poll::Ready(result) => {
                            result?;
                        }
                        Poll::Pending => {
                            return Err(js_error!(
                                Error: "a job of the engine waited for the machine, which a \
                                 workflow cannot"
                            ))
                        }
                    }
                }
                // Timers come from no API here; a collector's clean-up is not a workflow's to
                // see.
                _ => {}
            }
        }
    }
}

/// A new engine that loads modules with `loader`.
pub(crate) fn context(loader: Rc<Loader>) -> Result<Context, String> {
    let mut context = Context::builder()
        .job_executor(Rc::new(Jobs::default()))
        .module_loader(loader)
        .clock(Rc::new(HostClock))
        .host_hooks(Rc::new(Hooks))
        .can_block(false)
        .build()
        .map_err(|error| error.to_string())?;
    // Deep recursion fails the workflow with a message, as Node's does past ~10,000 frames,
    // rather than at Boa's default of 512.
    context
        .runtime_limits_mut()
        .set_recursion_limit(RECURSION_LIMIT);
    context
        .runtime_limits_mut()
        .set_stack_size_limit(STACK_LIMIT);
    install(&mut context).map_err(|error| crate::values::describe(&error, &mut context))?;
    // The build's own randomness (seeded from the sources): top-level code draws the same
    // numbers each build.
    reseed().map_err(|error| error.to_string())?;
    Ok(context)
}

fn install(context: &mut Context) -> JsResult<()> {
    let global = context.global_object();
    for name in ["WeakRef", "FinalizationRegistry"] {
        global.delete_property_or_throw(js_string!(name), context)?;
    }
    let math = global
        .get(js_string!("Math"), context)?
        .as_object()
        .ok_or_else(|| js_error!(Error: "no Math"))?;
    let random = NativeFunction::from_fn_ptr(math_random).to_js_function(context.realm());
    math.set(js_string!("random"), random, true, context)?;
    let stringify = global
        .get(js_string!("JSON"), context)?
        .as_object()
        .ok_or_else(|| js_error!(Error: "no JSON"))?
        .get(js_string!("stringify"), context)?
        .as_object()
        .ok_or_else(|| js_error!(Error: "no JSON.stringify"))?;
    STRINGIFY.with(|slot| *slot.borrow_mut() = Some(stringify));
    let prelude = Script::parse(
        Source::from_bytes(PRELUDE).with_path(Path::new("<wfhost prelude>")),
        None,
        context,
    )?
    .evaluate(context)?;
    let services = native::services(context);
    prelude
        .as_callable()
        .ok_or_else(|| js_error!(Error: "the prelude is not a function"))?
        .call(&JsValue::undefined(), &[services.into()], context)?;
    Ok(())
}

fn math_random(_: &JsValue, _: &[JsValue], _: &mut Context) -> JsResult<JsValue> {
    Ok(JsValue::new(
        RANDOM.with(|random| random.borrow_mut().random::<f64>()),
    ))
}

/// Seeds `Math.random` from 256 journaled random bits: each workflow draws its own numbers and
/// a replay draws the same ones.
pub(crate) fn reseed() -> JsResult<()> {
    let mut seed = [0u8; 32];
    native::entropy(&mut seed)?;
    RANDOM.with(|random| *random.borrow_mut() = SmallRng::from_seed(seed));
    Ok(())
}

/// Whether `function` is an `async function` (or an async arrow or method).
pub(crate) fn is_async_function(function: &JsObject, context: &Context) -> bool {
    let prototype = context
        .intrinsics()
        .constructors()
        .async_function()
        .prototype();
    function
        .prototype()
        .is_some_and(|found| JsObject::equals(&found, &prototype))
}

/// Collects what loading left behind, so that the snapshot holds only what lives.
pub(crate) fn settle_heap(_context: &mut Context) {
    boa_gc::force_collect();
}
