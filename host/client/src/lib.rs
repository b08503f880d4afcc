//! A client of wfhost's HTTP API, for Rust programs that start, watch, message and cancel
//! workflows on a `wfhost serve --http` server without building the engine (no wasmtime).
//!
//! # Core concepts
//!
//! A [`Client`] talks to one server: one method per route of the API, blocking, connections
//! kept alive. It sends the server's token with every call when given one
//! ([`Client::with_token`]), and trusts a server's own certificate when told to
//! ([`Client::with_root_certificates`]).
//!
//! The [`wire`] module holds the JSON of every request and answer, the same types the server
//! writes (and its OpenAPI document is made from), so the two cannot drift apart.
//!
//! A call the server refuses is an [`Error`] with the HTTP status and the `code` and `message`
//! of the server's `{"error"}` body; one that got no answer has no status.
//!
//! ```no_run
//! use wfhost_client::{wire::StartRequest, Client};
//!
//! let client = Client::new("http://127.0.0.1:8080")?.with_token("s3cret");
//! let (module, _new) = client.put_module(&std::fs::read("hello.wasm").unwrap())?;
//! let started = client.start(&StartRequest {
//!     id: Some("greet-1".into()),
//!     module: module.hash,
//!     entry: "greet".into(),
//!     input: serde_json::value::to_raw_value("world").unwrap(),
//! })?;
//! let done = client.result(&started.workflow.id, Some(std::time::Duration::from_secs(30)))?;
//! println!("{}: {:?}", done.status, done.result);
//! # Ok::<(), wfhost_client::Error>(())
//! ```
#![deny(missing_docs)]

mod client;
pub mod duration;
mod error;
pub mod wire;

pub use client::{segment, Client, DEFAULT_RETRY_FOR, DEFAULT_TIMEOUT};
pub use error::{Error, Result};
