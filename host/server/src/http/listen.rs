//! Serving the API on a socket: HTTP/1.1 and HTTP/2 with hyper, TLS with rustls, on a tokio
//! runtime of its own. What a client can hold is bounded here: connections open (and requests
//! at once, over HTTP/2), the time to send a request's headers (an idle connection is closed
//! after it too), and a TLS handshake's time.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

use super::api::Api;
use super::connection::{busy, speaks_h2, Connection, Counted};
use wfhost::{Error, ErrorKind, Result};

/// Connections open at once unless [`ServeOptions::max_connections`] says otherwise; past it, a
/// new connection is answered `503` and closed (over TLS, closed without an answer, which would
/// need a handshake). Each waiter of `result?wait=` holds one: its connection over HTTP/1.1;
/// over HTTP/2, where a connection carries many requests, its request does, and the
/// connection one more.
pub const DEFAULT_MAX_CONNECTIONS: usize = 20_000;

/// How long a client may take to send a request's headers, and how long a connection may sit
/// idle between requests, unless [`ServeOptions::header_timeout`] says otherwise.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Threads of the server's blocking pool, at most: its calls to the store take turns, so this
/// is never reached in practice; it bounds the threads whatever happens.
const BLOCKING_THREADS: usize = 32;

/// How long writing to a client may stall: one that stops reading its answers is let go.
pub(super) const WRITE_STALL: Duration = Duration::from_secs(60);

/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How the API is served: TLS, and the limits on connections.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    tls: Option<Tls>,
    max_connections: usize,
    header_timeout: Duration,
    threads: usize,
    grace: Duration,
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            tls: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            threads: 2,
            grace: Duration::from_secs(5),
        }
    }
}

impl ServeOptions {
    /// Plain HTTP, [`DEFAULT_MAX_CONNECTIONS`], [`DEFAULT_HEADER_TIMEOUT`], two threads, 5
    /// seconds' grace at [`Serving::stop`].
    pub fn new() -> ServeOptions {
        ServeOptions::default()
    }

    /// Serves HTTPS with `tls`.
    pub fn tls(mut self, tls: Tls) -> ServeOptions {
        self.tls = Some(tls);
        self
    }

    /// Connections open at once (at least 1).
    pub fn max_connections(mut self, connections: usize) -> ServeOptions {
        self.max_connections = connections.max(1);
        self
    }

    /// How long a request's headers may take to arrive, and a connection may sit idle.
    pub fn header_timeout(mut self, timeout: Duration) -> ServeOptions {
        self.header_timeout = timeout;
        self
    }

    /// Threads of the server's runtime (at least 1; requests that read the store run on a
    /// pool beside them).
    pub fn threads(mut self, threads: usize) -> ServeOptions {
        self.threads = threads.max(1);
        self
    }

    /// How long requests in flight may take to finish at [`Serving::stop`].
    pub fn grace(mut self, grace: Duration) -> ServeOptions {
        self.grace = grace;
        self
    }
}

/// A certificate chain and its key, for HTTPS.
#[derive(Clone)]
pub struct Tls {
    config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

impl Tls {
    /// The certificate chain in the PEM file `cert` and its private key in the PEM file `key`.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Tls> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|e| {
                Error::new(
                    ErrorKind::Io,
                    format!("cannot read {}: {e}", path.display()),
                )
            })
        };
        Tls::from_pem(&read(cert)?, &read(key)?)
    }

    /// The certificate chain `cert` and its private key `key`, both PEM.
    pub fn from_pem(cert: &[u8], key: &[u8]) -> Result<Tls> {
        let config_error = |what: String| Error::new(ErrorKind::Config, what);
        let chain = CertificateDer::pem_slice_iter(cert)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| config_error(format!("the TLS certificate is not PEM: {e}")))?;
        if chain.is_empty() {
            return Err(config_error(
                "the TLS certificate file holds no certificate (PEM, `-----BEGIN CERTIFICATE-----`)"
                    .into(),
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| {
            config_error(format!(
                "the TLS key file holds no private key in PEM (PKCS#8, PKCS#1 or SEC1): {e}"
            ))
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| config_error(format!("TLS: {e}")))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| {
                config_error(format!(
                    "the TLS certificate and key do not go together: {e}"
                ))
            })?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Tls {
            config: Arc::new(config),
        })
    }
}

/// A running server: [`stop`](Self::stop) it, or drop it to stop it at once.
#[derive(Debug)]
pub struct Serving {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    runtime: Option<tokio::runtime::Runtime>,
    accepting: Option<tokio::task::JoinHandle<()>>,
    grace: Duration,
    max_connections: usize,
}

impl Serving {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The connections it takes at once: [`ServeOptions::max_connections`], or fewer when the
    /// process may not open that many files (it raises its limit as far as it may first).
    pub fn max_connections(&self) -> usize {
        self.max_connections
    }

    /// Stops accepting, lets requests in flight finish within the grace period, and stops.
    pub fn stop(mut self) {
        self.shut(self.grace);
    }

    fn shut(&mut self, grace: Duration) {
        let _ = self.stop.send(true);
        if let Some(runtime) = self.runtime.take() {
            if let Some(accepting) = self.accepting.take() {
                let _ = runtime.block_on(async { tokio::time::timeout(grace, accepting).await });
            }
            runtime.shutdown_timeout(Duration::from_millis(100));
        }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.shut(Duration::ZERO);
    }
}

impl Api {
    /// Serves the API on `listener` (bound already: `127.0.0.1:8080`, say) on a runtime of its
    /// own, until [`Serving::stop`].
    pub fn serve(&self, listener: std::net::TcpListener, options: ServeOptions) -> Result<Serving> {
        let io_error =
            |what: &str, e: std::io::Error| Error::new(ErrorKind::Io, format!("{what}: {e}"));
        let addr = listener
            .local_addr()
            .map_err(|e| io_error("the listener has no address", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| io_error("cannot serve on the listener", e))?;
        deepen_backlog(&listener);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(options.threads)
            // Calls to the store take turns (`Api::max_store_calls`, the async waits' reads):
            // a bound for the rest.
            .max_blocking_threads(BLOCKING_THREADS)
            .thread_name("wfhost-http")
            .enable_all()
            .build()
            .map_err(|e| io_error("cannot start the HTTP server's threads", e))?;
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(listener)
                .map_err(|e| io_error("cannot serve on the listener", e))?
        };
        let (stop, stopped) = watch::channel(false);
        let router = self.router();
        let metrics = self.state.metrics.clone();
        let grace = options.grace;
        let room = super::descriptors::room_for(options.max_connections);
        if room.connections < options.max_connections {
            tracing::warn!(
                "this process may open {} files ({} open now, {} kept for the store, workers \
                 and calls): it serves at most {} connections at once, not the {} asked for \
                 (--max-connections); past them a client gets 503. Raise the hard limit on open \
                 files (ulimit -Hn, systemd's LimitNOFILE=) for more",
                room.limit,
                room.in_use,
                room.reserve,
                room.connections,
                options.max_connections
            );
        }
        let options = ServeOptions {
            max_connections: room.connections,
            ..options
        };
        let max_connections = room.connections;
        let accepting = runtime.spawn(accept(listener, router, options, stopped, metrics));
        Ok(Serving {
            addr,
            stop,
            runtime: Some(runtime),
            accepting: Some(accepting),
            grace,
            max_connections,
        })
    }
}

/// Accepts connections until told to stop, then waits for those open to finish.
async fn accept(
    listener: tokio::net::TcpListener,
    router: Router,
    options: ServeOptions,
    mut stopped: watch::Receiver<bool>,
    metrics: Option<wfhost::Metrics>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(options.max_connections));
    let tls = options
        .tls
        .map(|tls| tokio_rustls::TlsAcceptor::from(tls.config));
    let mut tasks = tokio::task::JoinSet::new();
    let mut backoff = super::descriptors::Backoff::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped.changed() => break,
        };
        // Reap what finished, so the set stays as large as the connections open.
        while tasks.try_join_next().is_some() {}
        let (stream, peer) = match accepted {
            Ok(accepted) => {
                backoff.accepted();
                accepted
            }
            Err(error) => {
                // Out of file descriptors, most likely: wait for some to close.
                let wait = backoff.failed(&error);
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stopped.changed() => break,
                }
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            // Past the limit: turned away at once, at no cost (no task, no TLS handshake).
            if tls.is_none() {
                let _ = stream.try_write(busy(options.max_connections).as_bytes());
            }
            drop(stream);
            continue;
        };
        let connection = Connection {
            router: router.clone(),
            peer,
            header_timeout: options.header_timeout,
            stopped: stopped.clone(),
            slots: Arc::clone(&slots),
            max_slots: options.max_connections,
        };
        let counted = Counted::new(metrics.clone());
        let header_timeout = options.header_timeout;
        // A task each, of its own type: a plain connection's holds nothing of TLS.
        match tls.clone() {
            Some(tls) => tasks.spawn(async move {
                let stream = Stalled::new(stream, WRITE_STALL);
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(stream)).await {
                    Ok(Ok(stream)) => {
                        let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
                        connection.serve(stream, h2).await
                    }
                    Ok(Err(error)) => tracing::debug!("a TLS handshake failed: {error}"),
                    Err(_) => tracing::debug!("a TLS handshake took too long"),
                }
                // The slot first: once the count is down, the slot is free.
                drop((slot, counted));
            }),
            None => tasks.spawn(async move {
                // Nothing sent within the header timeout (or the server stopping first):
                // closed, as HTTP/1.1's timeout would. (HTTP/1.1's own timeout starts at the
                // first bytes, so the first request's head may take up to twice it.)
                let mut stopped = connection.stopped.clone();
                let h2 = tokio::select! {
                    biased;
                    h2 = speaks_h2(&stream, header_timeout) => h2,
                    _ = stopped.changed() => None,
                };
                if let Some(h2) = h2 {
                    connection
                        .serve(Stalled::new(stream, WRITE_STALL), h2)
                        .await;
                }
                // The slot first: once the count is down, the slot is free.
                drop((slot, counted));
            }),
        };
    }
    drop(listener);
    while tasks.join_next().await.is_some() {}
}

/// Connections the kernel may queue for the listener before it takes them (capped by the
/// system's `net.core.somaxconn`): a burst of clients connecting at once is queued rather than
/// dropped (a dropped connection's client waits a second before it tries again). The standard
/// library listens with 128.
const BACKLOG: i32 = 4096;

/// Listens on `listener` again with [`BACKLOG`] (listening again on a listening socket changes
/// its backlog).
fn deepen_backlog(listener: &std::net::TcpListener) {
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd as _;
        // SAFETY: `listen` on a socket this listener owns, which is bound and listening.
        let listened = unsafe { libc::listen(listener.as_raw_fd(), BACKLOG) };
        if listened != 0 {
            tracing::debug!(
                "could not deepen the listener's backlog: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    #[cfg(not(unix))]
    let _ = listener;
}

/// A connection whose writes may stall for `limit` at most, then fail: a client that stops
/// reading (its window full) holds its connection no longer than that.
struct Stalled<S> {
    inner: S,
    since: Option<Pin<Box<tokio::time::Sleep>>>,
    limit: Duration,
}

impl<S> Stalled<S> {
    fn new(inner: S, limit: Duration) -> Stalled<S> {
        Stalled {
            inner,
            since: None,
            limit,
        }
    }

    /// `poll`'s outcome, or a timeout once writes have been pending for `limit`.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<std::io::Result<T>>,
    ) -> Poll<std::io::Result<T>> {
        if poll.is_ready() {
            self.since = None;
            return poll;
        }
        let limit = self.limit;
        let since = self
            .since
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match since.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client read nothing of its answer for too long",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Stalled<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Stalled<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, poll)
    }
}
