//! wfhost's server: a host's [`Client`](wfhost::Client) over HTTP ([`http`]: the API, its
//! OpenAPI document, the web UI, the task board's routes for activity workers) and the serve
//! loop ([`Server`]: claiming workflows, firing schedules, pruning what is past its retention),
//! as `wfhost serve` runs them. Built only on the engine's public `Host`, `Client` and
//! `Metrics`: an application that embeds the engine without serving it does not compile any of
//! this.
#![deny(missing_docs)]

pub mod http;
mod serve;

pub use serve::{Server, Stopper, DEFAULT_CLAIM, DEFAULT_POLL, DEFAULT_SERVE_GRACE};
