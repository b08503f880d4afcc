//! What serving a connection over HTTP/2 adds to HTTP/1.1's bounds, where one connection carries
//! many requests at once.
//!
//! - **Slots.** Each request takes one of the server's slots (`--max-connections`, the
//!   semaphore the connections take theirs from) until its answer has been handed on, so that
//!   requests at once are bounded alike whichever protocol carries them; one that finds none is
//!   answered `503 too_many_requests` on its stream, and the connection goes on.
//! - **Answers that stall.** HTTP/2's flow control holds back what a client does not take
//!   before anything is written to the socket, where the connection's write stall cannot see
//!   it. An answer is handed on in chunks of at most [`CHUNK`], its last byte alone and last of
//!   all: hyper asks for the next chunk only once the stream's window covers what it holds, so
//!   an answer is done only when all of it can go to the socket (where the write stall watches
//!   it). A connection with an answer that has not moved for the write stall's time is closed.
//! - **Idle connections.** One with no request in flight and no answer going out for the
//!   header timeout is shut gracefully (hyper closes an idle HTTP/1.1 connection itself; an
//!   HTTP/2 one would stay open), and closed if it is quiet as long again (a graceful close
//!   waits for the client's answer to a ping), or at the latest after the write stall's time.
//! - **Clients without the token.** A `401` closes an HTTP/1.1 connection (`Connection:
//!   close`, which HTTP/2 has no word for): over HTTP/2 it shuts the connection gracefully,
//!   with the same bounds.
//! - **Request bodies.** A stream's window is 64 KiB and the connection's 256 KiB: what a
//!   client sends ahead of what the server reads (hyper's defaults are 1 MiB each).

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request, Response, StatusCode};
use axum::Router;
use hyper::body::{Bytes, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tower::ServiceExt as _;

use super::connection::too_many;
use super::listen::WRITE_STALL;

/// Requests one HTTP/2 connection carries at once (its `SETTINGS_MAX_CONCURRENT_STREAMS`).
pub const H2_STREAMS: u32 = 128;

/// The largest header list a request may send, decoded (hyper's default: HPACK makes a large
/// list cheap to send).
const MAX_HEADERS: u32 = 16 * 1024;

/// The most of an answer handed to HTTP/2 at once: what a stream whose client takes nothing
/// holds buffered besides its body.
const CHUNK: usize = 16 * 1024;

/// What an HTTP/2 connection's server side needs to know of where it is.
pub(super) struct Serve<'a> {
    pub(super) router: Router,
    pub(super) peer: std::net::SocketAddr,
    pub(super) slots: Arc<Semaphore>,
    pub(super) max_slots: usize,
    pub(super) header_timeout: Duration,
    pub(super) stopped: &'a mut watch::Receiver<bool>,
}

/// Serves HTTP/2 on `io` until the client goes, the connection idles past the header timeout
/// or an answer stalls past the write stall's time, or the server stops (then after the
/// requests in flight).
pub(super) async fn serve<S>(io: TokioIo<S>, serve: Serve<'_>) -> hyper::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::default());
    let service = {
        let (router, peer, activity) = (serve.router, serve.peer, Arc::clone(&activity));
        let (slots, max_slots) = (serve.slots, serve.max_slots);
        hyper::service::service_fn(move |request: Request<Incoming>| {
            let running = Running::new(&activity);
            answer(
                router.clone(),
                peer,
                request,
                running,
                Arc::clone(&slots),
                max_slots,
            )
        })
    };
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_STREAMS)
        .max_header_list_size(MAX_HEADERS)
        .max_send_buf_size(CHUNK)
        .initial_stream_window_size(64 * 1024)
        .initial_connection_window_size(256 * 1024);
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    let idle_limit = serve.header_timeout.max(Duration::from_millis(100));
    // Shut gracefully (idle, a 401): what is in flight may finish, within the write stall's
    // time; a second quiet spell closes it sooner.
    let mut shut_by: Option<Instant> = None;
    let mut stopping = false;
    loop {
        let shut_at = shut_by.unwrap_or_else(Instant::now);
        tokio::select! {
            result = connection.as_mut() => return result,
            _ = serve.stopped.changed(), if !stopping => {
                // The server's grace bounds the rest.
                stopping = true;
                connection.as_mut().graceful_shutdown();
            }
            _ = activity.unauthorized.notified(), if shut_by.is_none() => {
                connection.as_mut().graceful_shutdown();
                activity.touch();
                shut_by = Some(Instant::now() + WRITE_STALL);
            }
            _ = stalled(&activity, WRITE_STALL) => {
                tracing::debug!("an HTTP/2 client took nothing of an answer for too long");
                return Ok(());
            }
            _ = idle(&activity, idle_limit) => {
                if shut_by.is_some() {
                    tracing::debug!("an HTTP/2 connection shut for idling did not close");
                    return Ok(());
                }
                connection.as_mut().graceful_shutdown();
                // The next quiet spell counts from here.
                activity.touch();
                shut_by = Some(Instant::now() + WRITE_STALL);
            }
            _ = tokio::time::sleep_until(shut_at), if shut_by.is_some() => {
                tracing::debug!("an HTTP/2 connection did not close in time after being shut");
                return Ok(());
            }
        }
    }
}

/// What a connection is doing, as its requests and answers tell its watches.
struct Activity {
    /// Requests being answered now.
    running: AtomicUsize,
    /// When a request last began or ended, or an answer ended: milliseconds after `opened`.
    last: AtomicU64,
    opened: Instant,
    /// The answers being handed on, by number: when each last moved.
    answers: Mutex<HashMap<u64, Instant>>,
    /// Answers numbered since the connection opened.
    numbered: AtomicU64,
    /// Told when a request is answered `401`.
    unauthorized: tokio::sync::Notify,
}

impl Default for Activity {
    fn default() -> Activity {
        Activity {
            running: AtomicUsize::new(0),
            last: AtomicU64::new(0),
            opened: Instant::now(),
            answers: Mutex::new(HashMap::new()),
            numbered: AtomicU64::new(0),
            unauthorized: tokio::sync::Notify::new(),
        }
    }
}

impl Activity {
    fn touch(&self) {
        let now = self.opened.elapsed().as_millis() as u64;
        self.last.fetch_max(now, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.opened + Duration::from_millis(self.last.load(Ordering::Relaxed))
    }
}

/// A request counted in [`Activity::running`] until its handler is done (or dropped).
struct Running(Arc<Activity>);

impl Running {
    fn new(activity: &Arc<Activity>) -> Running {
        activity.running.fetch_add(1, Ordering::Relaxed);
        activity.touch();
        Running(Arc::clone(activity))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.touch();
        self.0.running.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One request's answer: the router's, or a `503` when it finds no slot free.
async fn answer(
    router: Router,
    peer: std::net::SocketAddr,
    mut request: Request<Incoming>,
    running: Running,
    slots: Arc<Semaphore>,
    max_slots: usize,
) -> Result<Response<Body>, Infallible> {
    let Ok(slot) = slots.try_acquire_owned() else {
        let body = too_many(
            "too_many_requests",
            format!(
                "the server answers {max_slots} requests and holds {max_slots} connections at \
                 once, as many as it takes (--max-connections): ask again"
            ),
        );
        let busy = Response::builder()
            .status(StatusCode::SERVICE_UNAVAILABLE)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::RETRY_AFTER, "1")
            .body(Body::from(body))
            .unwrap_or_default();
        // Watched as any answer, with no slot to hold.
        let activity = Arc::clone(&running.0);
        return Ok(busy.map(|body| Body::new(Held::new(body, activity, None))));
    };
    request
        .extensions_mut()
        .insert(axum::extract::ConnectInfo(peer));
    let response = router.oneshot(request).await?;
    let activity = Arc::clone(&running.0);
    if response.status() == StatusCode::UNAUTHORIZED {
        activity.unauthorized.notify_one();
    }
    drop(running);
    Ok(response.map(|body| Body::new(Held::new(body, activity, Some(slot)))))
}

/// An answer's body, handed on in chunks of [`CHUNK`] at most and its last byte alone, that
/// holds its request's slot until it is all handed on (or its stream is reset), and tells its
/// connection each time it moves.
struct Held {
    body: Body,
    /// What is left of a frame of the body: the rest of a frame larger than [`CHUNK`], or the
    /// answer's last byte.
    rest: Bytes,
    number: u64,
    activity: Arc<Activity>,
    _slot: Option<OwnedSemaphorePermit>,
}

impl Held {
    fn new(body: Body, activity: Arc<Activity>, slot: Option<OwnedSemaphorePermit>) -> Held {
        let number = activity.numbered.fetch_add(1, Ordering::Relaxed);
        activity.answers.lock().insert(number, Instant::now());
        Held {
            body,
            rest: Bytes::new(),
            number,
            activity,
            _slot: slot,
        }
    }

    fn moved(&self) {
        if let Some(at) = self.activity.answers.lock().get_mut(&self.number) {
            *at = Instant::now();
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.activity.answers.lock().remove(&self.number);
        self.activity.touch();
    }
}

impl hyper::body::Body for Held {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let held = &mut *self;
        if held.rest.is_empty() {
            let frame = match Pin::new(&mut held.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => frame,
                other => return other,
            };
            match frame.into_data() {
                Ok(data) if data.is_empty() => return Poll::Ready(Some(Ok(Frame::data(data)))),
                Ok(data) => held.rest = data,
                Err(frame) => {
                    held.moved();
                    return Poll::Ready(Some(Ok(frame)));
                }
            }
        }
        // The answer's last byte goes alone: see the module's notes.
        let last = held.body.is_end_stream();
        let size = if last && held.rest.len() <= CHUNK {
            (held.rest.len() - 1).max(1)
        } else {
            held.rest.len().min(CHUNK)
        };
        let chunk = held.rest.split_to(size);
        held.moved();
        Poll::Ready(Some(Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.body.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(rest));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(rest));
        }
        hint
    }
}

/// Returns once the connection has had no request in flight and no answer going out for
/// `limit` since the last began or ended.
async fn idle(activity: &Activity, limit: Duration) {
    loop {
        let last = activity.last();
        if activity.running.load(Ordering::Relaxed) > 0 || !activity.answers.lock().is_empty() {
            tokio::time::sleep(limit).await;
            continue;
        }
        tokio::time::sleep_until(last + limit).await;
        let quiet = activity.last() == last
            && activity.running.load(Ordering::Relaxed) == 0
            && activity.answers.lock().is_empty();
        if quiet {
            return;
        }
    }
}

/// Returns once an answer of the connection has not moved for `limit` (within a quarter of
/// `limit` more).
async fn stalled(activity: &Activity, limit: Duration) {
    loop {
        tokio::time::sleep(limit / 4).await;
        let oldest = activity.answers.lock().values().min().copied();
        if oldest.is_some_and(|moved| moved.elapsed() >= limit) {
            return;
        }
    }
}
