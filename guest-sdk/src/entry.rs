//! Entry points: async functions, or hand-written state machines.

use std::fmt::Display;
use std::future::Future;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::Serialize;
use wfcontract::{Encoding, Event, Payload, Pid, StepOutput};

use crate::ctx::Ctx;
use crate::error::Error;
use crate::runtime::{Ending, Task};

/// A started entry point. Not a stable API: the machinery behind `entry_points!`.
#[doc(hidden)]
pub struct Running(pub(crate) Started);

pub(crate) enum Started {
    /// An `async fn`, driven by the SDK's executor.
    Async(Task),
    /// A hand-written state machine.
    Machine(Box<dyn DynMachine>),
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Started::Async(_) => "Running::Async",
            Started::Machine(_) => "Running::Machine",
        })
    }
}

/// A registered entry point, whatever its kind. Not a stable API: the machinery behind
/// `entry_points!`.
#[doc(hidden)]
pub trait Entry: 'static {
    /// Starts it with its context and raw input. An error fails `init`.
    fn start(&self, ctx: Ctx, input: Payload) -> Result<Running, String>;
}

/// Anything `entry_points!` accepts: an `async fn(Ctx, I) -> Result<O, E>`, or [`machine`].
/// `Marker` only keeps the implementations apart. Not a stable API.
#[doc(hidden)]
pub trait IntoEntry<Marker> {
    /// The type-erased entry point.
    fn into_entry(self) -> Box<dyn Entry>;
}

/// Remembers an async entry point's types without owning any of them.
type Signature<I, O, E, Fut> = PhantomData<fn(I) -> (O, E, Fut)>;

struct AsyncEntry<F, I, O, E, Fut> {
    f: F,
    types: Signature<I, O, E, Fut>,
}

impl<F, I, O, E, Fut> Entry for AsyncEntry<F, I, O, E, Fut>
where
    F: Fn(Ctx, I) -> Fut + 'static,
    Fut: Future<Output = Result<O, E>> + 'static,
    I: DeserializeOwned + 'static,
    O: Serialize + 'static,
    E: Display + 'static,
{
    fn start(&self, ctx: Ctx, input: Payload) -> Result<Running, String> {
        let entry = ctx.entry().to_string();
        let decoded: I = input
            .decode()
            .map_err(|e| format!("entry point '{entry}' cannot use its input: {e}"))?;
        let encoding = match ctx.encoding() {
            Encoding::Json => Encoding::Json,
            Encoding::Postcard | Encoding::Bytes => Encoding::Postcard,
        };
        let future = (self.f)(ctx, decoded);
        let task = Task::new(Box::pin(async move {
            let output = future.await.map_err(|e| ending(&entry, e))?;
            Payload::encode(encoding, &output).map_err(|e| {
                Ending::Failed(format!(
                    "entry point '{entry}' returned a value that does not encode: {e}"
                ))
            })
        }));
        Ok(Running(Started::Async(task)))
    }
}

/// How an entry point's error ends its process: as cancelled when it is this SDK's
/// [`Error::Cancelled`] (the workflow stopped because it was asked to), as failed otherwise.
fn ending<E: Display + 'static>(entry: &str, error: E) -> Ending {
    let cancelled = (&error as &dyn std::any::Any)
        .downcast_ref::<Error>()
        .is_some_and(Error::is_cancelled);
    if cancelled {
        Ending::Cancelled(format!("entry point '{entry}' stopped: it was cancelled"))
    } else {
        Ending::Failed(format!("entry point '{entry}' failed: {error}"))
    }
}

impl<F, I, O, E, Fut> IntoEntry<(Ctx, I, O, E, Fut)> for F
where
    F: Fn(Ctx, I) -> Fut + 'static,
    Fut: Future<Output = Result<O, E>> + 'static,
    I: DeserializeOwned + 'static,
    O: Serialize + 'static,
    E: Display + 'static,
{
    fn into_entry(self) -> Box<dyn Entry> {
        Box::new(AsyncEntry {
            f: self,
            types: PhantomData,
        })
    }
}

/// What a hand-written state machine learns when it starts.
#[derive(Clone, Debug)]
pub struct StartInfo {
    /// Its pid.
    pub pid: Pid,
    /// The process that spawned it, if any.
    pub parent: Option<Pid>,
    /// The entry point it runs.
    pub entry: String,
    /// The encoding its input arrived in.
    pub encoding: Encoding,
    /// The most yields one step may carry: a machine that yields more fails. (Async entry points
    /// need not care: the SDK holds extra yields back for the next step.)
    pub max_yields: u32,
}

/// The low-level way to write an entry point: the step state machine by hand. The SDK hands each
/// step's events to [`step`](Machine::step) as they come and sends back whatever it writes to
/// `out` (status, yields and `receive`; tags are the machine's own business).
///
/// A machine gets messages only when it asks: `out.receive` is how many its next step takes (it
/// arrives as zero, and then no message is delivered and none wakes it; the rest wait at the host
/// in its bounded mailbox). It must also keep each step within [`StartInfo::max_yields`].
pub trait Machine: Sized + 'static {
    /// The decoded input.
    type Input: DeserializeOwned;

    /// Builds the machine. An error fails the process before its first step.
    fn start(info: &StartInfo, input: Self::Input) -> Result<Self, String>;

    /// Advances with `events`; `out` arrives reset (status `Wait`, no yields).
    fn step(&mut self, events: Vec<Event>, out: &mut StepOutput);
}

/// A type-erased [`Machine`]. Not a stable API.
#[doc(hidden)]
pub trait DynMachine {
    /// See [`Machine::step`].
    fn step(&mut self, events: Vec<Event>, out: &mut StepOutput);
}

impl<M: Machine> DynMachine for M {
    fn step(&mut self, events: Vec<Event>, out: &mut StepOutput) {
        Machine::step(self, events, out)
    }
}

/// Registers `M` as an entry point: `entry_points!(counter = wfguest::machine::<Counter>())`.
pub fn machine<M: Machine>() -> MachineEntry<M> {
    MachineEntry(PhantomData)
}

/// The entry point of a [`Machine`]; see [`machine`].
#[doc(hidden)]
pub struct MachineEntry<M>(PhantomData<fn() -> M>);

impl<M: Machine> std::fmt::Debug for MachineEntry<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MachineEntry")
    }
}

impl<M: Machine> Entry for MachineEntry<M> {
    fn start(&self, ctx: Ctx, input: Payload) -> Result<Running, String> {
        let info = StartInfo {
            pid: ctx.pid(),
            parent: ctx.parent(),
            entry: ctx.entry().to_string(),
            encoding: ctx.encoding(),
            max_yields: ctx.max_yields(),
        };
        let input: M::Input = input
            .decode()
            .map_err(|e| format!("entry point '{}' cannot use its input: {e}", info.entry))?;
        let machine = M::start(&info, input)
            .map_err(|e| format!("entry point '{}' failed to start: {e}", info.entry))?;
        Ok(Running(Started::Machine(Box::new(machine))))
    }
}

/// Marks the [`Machine`] implementation of [`IntoEntry`].
#[doc(hidden)]
#[derive(Debug)]
pub struct MachineMarker;

impl<M: Machine> IntoEntry<MachineMarker> for MachineEntry<M> {
    fn into_entry(self) -> Box<dyn Entry> {
        Box::new(self)
    }
}
