//! One client connection: HTTP/1.1, or HTTP/2 when the client speaks it: over TLS when ALPN
//! chose `h2`, on plain HTTP when its first bytes are HTTP/2's preface (prior knowledge), which
//! [`speaks_h2`] reads without taking them. (hyper-util's `auto` builder does the same, but
//! holds both protocols' state in every connection: 9 KiB more resident for each HTTP/1.1
//! connection, measured with 10,000 waiters.) What HTTP/2 adds to the bounds is in `h2.rs`.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{watch, Semaphore};

/// The largest HTTP/1.1 request head, in bytes (its read buffer's limit).
const MAX_HEAD: usize = 64 * 1024;

/// The answer to a connection past the limit, written as it is accepted.
pub(super) fn busy(max: usize) -> String {
    let body = too_many(
        "too_many_connections",
        format!("the server holds {max} connections, as many as it takes (--max-connections): ask again"),
    );
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         connection: close\r\nretry-after: 1\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// The body of a `503` that did nothing: `{"error": {"code", "message"}}`.
pub(super) fn too_many(code: &str, message: String) -> String {
    serde_json::json!({"error": {"code": code, "message": message}}).to_string()
}

/// One connection's settings.
pub(super) struct Connection {
    pub(super) router: Router,
    /// Who is at the other end: each request carries it (`ConnectInfo`).
    pub(super) peer: std::net::SocketAddr,
    pub(super) header_timeout: Duration,
    pub(super) stopped: watch::Receiver<bool>,
    /// The server's slots, one a connection and one an HTTP/2 request being answered.
    pub(super) slots: Arc<Semaphore>,
    /// How many slots there are, for the `503`'s message.
    pub(super) max_slots: usize,
}

/// The first bytes of an HTTP/2 connection with prior knowledge.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether a plain connection opens with HTTP/2's preface, read without taking it: `None` when
/// it closes, fails or sends nothing for `timeout`. Three bytes of the preface decide (no
/// HTTP/1.1 method begins with `PRI`); a client that sends fewer first is looked at again
/// after a pause that doubles (5 ms to 320 ms).
pub(super) async fn speaks_h2(stream: &tokio::net::TcpStream, timeout: Duration) -> Option<bool> {
    let look = async {
        let mut first = [0u8; 3];
        let mut pause = Duration::from_millis(5);
        loop {
            let read = stream.peek(&mut first).await.ok()?;
            if read == 0 {
                return None;
            }
            if first[..read] != H2_PREFACE[..read] {
                return Some(false);
            }
            if read == first.len() {
                return Some(true);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(320));
        }
    };
    tokio::time::timeout(timeout, look).await.ok().flatten()
}

/// A connection counted in `wfhost_http_connections` while it is held.
pub(super) struct Counted(Option<wfhost::Metrics>);

impl Counted {
    pub(super) fn new(metrics: Option<wfhost::Metrics>) -> Counted {
        if let Some(metrics) = &metrics {
            metrics.http_connections(1);
        }
        Counted(metrics)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if let Some(metrics) = &self.0 {
            metrics.http_connections(-1);
        }
    }
}

impl Connection {
    /// Serves requests on `stream`, HTTP/2 if `h2` and HTTP/1.1 if not, until the client goes,
    /// the connection idles past the header timeout, or the server stops (then after the
    /// requests in flight).
    pub(super) async fn serve<S>(mut self, stream: S, h2: bool)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let io = TokioIo::new(stream);
        let result = if h2 {
            let serve = super::h2::Serve {
                router: self.router,
                peer: self.peer,
                slots: self.slots,
                max_slots: self.max_slots,
                header_timeout: self.header_timeout,
                stopped: &mut self.stopped,
            };
            // Boxed: an HTTP/1.1 connection's task holds none of HTTP/2's state.
            Box::pin(super::h2::serve(io, serve)).await
        } else {
            let peer = self.peer;
            let service = tower::util::MapRequest::new(
                self.router,
                move |mut request: axum::http::Request<hyper::body::Incoming>| {
                    request
                        .extensions_mut()
                        .insert(axum::extract::ConnectInfo(peer));
                    request
                },
            );
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(self.header_timeout)
                .max_buf_size(MAX_HEAD);
            let connection = builder.serve_connection(io, TowerToHyperService::new(service));
            tokio::pin!(connection);
            tokio::select! {
                result = connection.as_mut() => result,
                _ = self.stopped.changed() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            }
        };
        if let Err(error) = result {
            tracing::debug!("an HTTP connection ended: {error}");
        }
    }
}
