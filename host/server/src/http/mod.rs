//! The HTTP API: the operations of a [`Client`](wfhost::Client) over HTTP, JSON in and out, for
//! applications in any language, `curl`, dashboards and Prometheus.
//!
//! # Core concepts
//!
//! An [`Api`] holds the client its routes call (one serving a host, [`Client::serving`](wfhost::Client::serving)), the
//! token it wants, its limits and the [`Metrics`](wfhost::Metrics) it serves. Its
//! [`router`](Api::router) is an axum `Router` an application can mount among its own routes;
//! [`Api::serve`] runs it on a socket of its own, with TLS ([`Tls`]) and the limits on
//! connections ([`ServeOptions`]). `wfhost serve --http` does the latter.
//!
//! Every route but `GET /healthz` wants the token, when there is one, as
//! `Authorization: Bearer`. Every error is `{"error": {"code", "message"}}` with the status that
//! fits. `GET /v1/openapi.json` describes every route and body ([`Api::openapi`]): it is made
//! from the same types the routes read and write (`wfhost_client::wire`).
//!
//! ```no_run
//! use wfhost_server::http::{Api, ServeOptions};
//! use wfhost::{Client, Grants, Host, Metrics, SyncMode};
//!
//! let metrics = Metrics::new();
//! let host = Host::builder().store("wf.db", SyncMode::Full).metrics(&metrics).build()?;
//! host.recover()?;
//! let api = Api::new(Some(Client::serving(&host, Grants::default())?))
//!     .token("s3cret")?
//!     .metrics(&metrics);
//! let listener = std::net::TcpListener::bind("127.0.0.1:8080").unwrap();
//! let serving = api.serve(listener, ServeOptions::new())?;
//! // ... until it is time to stop:
//! serving.stop();
//! host.shutdown(std::time::Duration::from_secs(5));
//! # Ok::<(), wfhost::Error>(())
//! ```

mod api;
mod connection;
mod convert;
mod descriptors;
mod error;
mod extract;
mod h2;
mod listen;
mod openapi;
mod routes;
mod state;
mod traces;
mod ui;
mod workers;

pub use api::{
    Api, DEFAULT_MAX_BODY, DEFAULT_MAX_MODULE, DEFAULT_MAX_STORE_CALLS, DEFAULT_MAX_WAIT,
    DEFAULT_MAX_WAITING, DEFAULT_REQUEST_TIMEOUT,
};
pub use listen::{ServeOptions, Serving, Tls, DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_CONNECTIONS};
