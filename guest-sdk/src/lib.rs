//! Write wfhost workflows as ordinary async Rust, compiled to `wasm32-wasip1`.
//!
//! # Core concepts
//!
//! An **entry point** is an `async fn(Ctx, I) -> Result<O, E>`: `I` and `O` are serde types (the
//! input arrives as JSON or postcard and the result goes back in the same encoding), `E` anything
//! displayable. A module exposes several, registered once with [`entry_points!`], which also writes
//! the module's manifest (its ABI version and entry-point names, read by the host without running
//! any code) and exports the ABI functions. Authors write no `unsafe` and no ABI glue.
//!
//! A [`Ctx`] is the workflow's handle on its host. Each method is a command the host carries out:
//! [`Ctx::sleep`] and [`Ctx::sleep_until`] (the timer lives in the host), [`Ctx::log`], messages
//! ([`Ctx::send`], [`Ctx::recv`]), child workflows ([`Ctx::spawn`], [`Ctx::join`]), host functions
//! ([`Ctx::call`]), and time and randomness ([`Ctx::now`], [`Ctx::random`]). Awaiting one suspends
//! the workflow: the SDK yields the command with a tag, and the host's completion resumes it.
//! Several can be in flight at once: create them, then await them together, with the `futures`
//! crate's combinators if you like (below). The SDK gives the host at most as many commands per
//! step as the host takes, and the rest with the next steps.
//!
//! **Messages** wait at the host, in the workflow's bounded mailbox, until a receive asks for one:
//! the workflow holds in memory only what it asked for. [`Ctx::recv`] decodes the message as the
//! type asked for; one that does not decode is [`Error::Undecodable`], which holds it (match it,
//! or let `?` fail the workflow); [`Ctx::recv_valid`] skips such messages. A message to
//! [`Pid::HOST`] goes to the application that started the workflow.
//!
//! **Joins** keep results: a [`JoinFuture`] dropped before its child finished abandons only the
//! wait, and the next join of the same child gets the result.
//!
//! **Cancellation.** When the host cancels the process, every pending await returns
//! [`Error::Cancelled`]; the workflow may still run clean-up commands before it returns. An entry
//! point that returns `Error::Cancelled` ends as cancelled: a joining parent sees `child-cancelled`.
//!
//! For full control, implement [`Machine`] and write the step state machine by hand.
//!
//! ```no_run
//! use std::time::Duration;
//! use wfguest::{Ctx, Error};
//!
//! async fn greet(_ctx: Ctx, name: String) -> Result<String, Error> {
//!     Ok(format!("Hello, {name}!"))
//! }
//!
//! async fn nap(ctx: Ctx, millis: u64) -> Result<u64, Error> {
//!     // Two timers at once: both are yielded in the same step.
//!     let first = ctx.sleep(Duration::from_millis(millis));
//!     let second = ctx.sleep(Duration::from_millis(millis));
//!     first.await?;
//!     second.await?;
//!     ctx.info("rested");
//!     Ok(millis)
//! }
//!
//! wfguest::entry_points!(greet, nap);
//! # fn main() {}
//! ```
//!
//! The SDK's futures are ordinary futures: `join_all`, `select!` and `FuturesUnordered` from the
//! `futures` crate work on them (the host's tests run this code in `tests/guests/probe`).
//!
//! ```no_run
//! use std::time::Duration;
//! use futures::stream::{FuturesUnordered, StreamExt};
//! use futures::FutureExt;
//! use wfguest::{Ctx, Error, Pid};
//!
//! async fn gather(ctx: Ctx, inputs: Vec<String>) -> Result<Vec<usize>, Error> {
//!     // Every child at once, then every result, in order.
//!     let mut children = Vec::new();
//!     for input in &inputs {
//!         children.push(ctx.spawn("measure", input).await?);
//!     }
//!     futures::future::join_all(children.iter().map(|child| ctx.join(*child)))
//!         .await
//!         .into_iter()
//!         .collect()
//! }
//!
//! async fn deadline(ctx: Ctx, child: Pid) -> Result<Option<String>, Error> {
//!     // The first to finish wins; the join that lost keeps its result for a later join.
//!     futures::select! {
//!         result = ctx.join::<String>(child).fuse() => result.map(Some),
//!         _ = ctx.sleep(Duration::from_secs(30)).fuse() => Ok(None),
//!     }
//! }
//!
//! async fn fastest_first(ctx: Ctx, millis: Vec<u64>) -> Result<Vec<u64>, Error> {
//!     let mut naps: FuturesUnordered<_> = millis
//!         .into_iter()
//!         .map(|m| ctx.sleep(Duration::from_millis(m)).map(move |r| r.map(|()| m)))
//!         .collect();
//!     let mut order = Vec::new();
//!     while let Some(m) = naps.next().await {
//!         order.push(m?);
//!     }
//!     Ok(order)
//! }
//!
//! async fn measure(_ctx: Ctx, text: String) -> Result<usize, Error> {
//!     Ok(text.len())
//! }
//!
//! wfguest::entry_points!(gather, deadline, "fastest-first" = fastest_first, measure);
//! # fn main() {}
//! ```
#![deny(missing_docs)]

mod call;
mod ctx;
mod entry;
mod error;
mod guest;
mod join;
mod joins;
mod manifest;
mod runtime;

pub use call::CallFuture;
pub use ctx::Ctx;
pub use entry::{machine, Machine, StartInfo};
#[doc(hidden)]
pub use entry::{DynMachine, Entry, IntoEntry, MachineEntry, MachineMarker, Running};
pub use error::{Error, Result, Undecodable};
pub use join::JoinFuture;
pub use runtime::{CommandFuture, Message, RecvFuture};
pub use wfcontract::{
    Command, CommandError, Encoding, ErrorKind, Event, EventKind, Header, HttpRequest,
    HttpResponse, Level, Payload, Pid, Status, StepOutput, Tag,
};

/// How a failed call is tried again: see [`Ctx::call_with`]. `Retry::default()` is 1 s, doubling,
/// at most 100 s apart, 10 attempts; [`Retry::never`] is one attempt.
pub type Retry = wfcontract::RetryPolicy;

/// What `entry_points!` expands to. Not a stable API.
#[doc(hidden)]
pub mod __private {
    pub use crate::guest::{init, panic_message, reserve, step};
    pub use crate::manifest::{check_names, manifest, manifest_len};
    pub use crate::Entry;

    /// Type-erases an entry point.
    pub fn into_entry<M>(entry: impl crate::IntoEntry<M>) -> Box<dyn Entry> {
        entry.into_entry()
    }
}

/// Registers a module's entry points, writes its manifest and exports the ABI. Use it once per
/// module (a `cdylib` crate built for `wasm32-wasip1`).
///
/// Each item is an async function's name (the entry point takes that name), `name = expression`
/// for another implementation (such as `counter = wfguest::machine::<Counter>()`), or
/// `"name" = expression` for a name that is not a Rust identifier: entry point names may also hold
/// `-` and `.` (`"send-reminder" = send_reminder`). A name the manifest does not allow, or one
/// declared twice, fails the build.
#[macro_export]
macro_rules! entry_points {
    ($($name:tt $(= $entry:expr)?),+ $(,)?) => {
        const _: () = {
            const NAMES: &[&str] = &[$($crate::__entry_name!($name)),+];
            const LEN: usize = $crate::__private::manifest_len(NAMES);
            const _: () = $crate::__private::check_names(NAMES);

            #[cfg_attr(target_family = "wasm", link_section = "wfhost-manifest")]
            #[used]
            static MANIFEST: [u8; LEN] = $crate::__private::manifest::<LEN>(NAMES);

            fn lookup(name: &str) -> ::core::option::Option<::std::boxed::Box<dyn $crate::Entry>> {
                $(
                    if name == $crate::__entry_name!($name) {
                        return ::core::option::Option::Some(
                            $crate::__private::into_entry($crate::__entry_value!($name $(, $entry)?)),
                        );
                    }
                )+
                ::core::option::Option::None
            }

            #[no_mangle]
            extern "C" fn wfhost_reserve(len: u32) -> u32 {
                $crate::__private::reserve(len)
            }

            #[no_mangle]
            extern "C" fn wfhost_init(len: u32) -> u64 {
                $crate::__private::init(len, NAMES, lookup)
            }

            #[no_mangle]
            extern "C" fn wfhost_step(len: u32) -> u64 {
                $crate::__private::step(len)
            }

            #[no_mangle]
            extern "C" fn wfhost_panic_message() -> u64 {
                $crate::__private::panic_message()
            }
        };
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __entry_name {
    ($name:ident) => {
        stringify!($name)
    };
    ($name:literal) => {
        $name
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __entry_value {
    ($name:ident) => {
        $name
    };
    ($name:literal) => {
        compile_error!(concat!(
            "the entry point named ",
            stringify!($name),
            " needs its implementation: ",
            stringify!($name),
            " = function"
        ))
    };
    ($name:tt, $entry:expr) => {
        $entry
    };
}
