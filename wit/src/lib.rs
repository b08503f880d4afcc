//! The wfhost contract: the values that cross between a host and its guest workflows.
//!
//! # Core concepts
//!
//! A **process** is one running entry point of a workflow module. The host drives it by calling
//! `step` with a batch of [`Event`]s; the process answers with a [`StepOutput`]: its [`Status`] and
//! the [`Yield`]s it wants carried out. A yield pairs a [`Command`] (sleep, send a message, spawn a
//! child, call a host function, ...) with a [`Tag`] the process chose; when the host finishes the
//! command it sends back an [`EventKind::YieldComplete`] event with the same tag and either a result
//! [`Payload`] or a [`CommandError`].
//!
//! A [`Payload`] is bytes plus their [`Encoding`] (postcard or JSON), so callers and guests can each
//! use the encoding that suits them and still understand one another.
//!
//! Processes are named by [`Pid`]s. The [`manifest`] says what a module declares about itself (its
//! ABI version and entry points) in a custom section that the host reads without running guest code,
//! and [`abi`] says how everything travels across a core WebAssembly boundary. The same contract is
//! described in WIT in `wit/wfhost.wit`; a test fails when the two drift apart.
//!
//! ```
//! use wfcontract::{Command, Event, Payload, Status, StepOutput, Tag};
//! use std::time::Duration;
//!
//! // A process that sleeps once, then finishes with the JSON string "rested".
//! fn step(events: &[Event], out: &mut StepOutput) {
//!     if events.is_empty() {
//!         out.push(Tag(1), Command::Sleep(Duration::from_millis(10)));
//!         out.status = Status::Wait;
//!     } else {
//!         out.status = Status::Done(Payload::to_json("rested").unwrap());
//!     }
//! }
//!
//! let mut out = StepOutput::new();
//! step(&[], &mut out);
//! assert_eq!(out.yields.len(), 1);
//! out.reset();
//! step(&[Event::completion(Tag(1), Ok(Payload::empty()))], &mut out);
//! assert_eq!(out.status, Status::Done(Payload::json_bytes(b"\"rested\"".to_vec())));
//! ```
#![no_std]
#![deny(missing_docs)]

extern crate alloc;

pub mod abi;
pub mod builtin;
mod command;
mod event;
mod ids;
pub mod manifest;
mod payload;
mod step;

pub use builtin::{Header, HttpRequest, HttpResponse, RetryPolicy};
pub use command::{
    CallRequest, Command, CommandKind, Field, Level, LogRecord, RetryRequest, SendRequest,
    SpawnRequest,
};
pub use event::{CommandError, ErrorKind, Event, EventKind};
pub use ids::{Pid, Tag};
pub use payload::{Encoding, Payload, PayloadBytes, PayloadError, INLINE_BYTES};
pub use step::{InitRequest, Status, StepOutput, Yield};
