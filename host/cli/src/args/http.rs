//! The HTTP API's options (`wfhost serve --http`) and the metrics' (`wfhost run --metrics`):
//! where it listens, its token, TLS and limits.

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context as _};
use wfhost::Metrics;
use wfhost_server::http::{Api, ServeOptions, Serving, Tls};

use super::units::{parse_duration, parse_size};

/// Serving the HTTP API.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "HTTP API")]
pub struct HttpArgs {
    /// Serve the HTTP API (and /metrics) on ADDR, e.g. 127.0.0.1:8080. Without a token it
    /// listens on loopback only; with one (--token-file or WFHOST_TOKEN), anywhere
    /// (0.0.0.0:8080).
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,

    /// A file holding the token every request but GET /healthz must send as `Authorization:
    /// Bearer <token>`. Default: the WFHOST_TOKEN variable; neither: no token.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,

    /// Serve HTTPS with this certificate chain (PEM); with --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,

    /// The most connections open at once; past it, a new one is answered 503 and closed (over
    /// TLS, only closed). Over HTTP/2, where a connection carries up to 128 requests at once,
    /// each request also takes one until it is answered; past it, the request is answered 503.
    #[arg(long, value_name = "N", default_value_t = wfhost_server::http::DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,

    /// The largest JSON body a request may send (a module's limit is --max-module-size).
    #[arg(long, value_name = "SIZE", default_value = "8MiB", value_parser = parse_size)]
    max_body: usize,

    /// The longest a `wait=` (result, outbox) may last; a longer one waits this long.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    max_wait: Duration,

    /// The most requests waiting at once (result?wait=, outbox?wait=); more are answered 503.
    #[arg(long, value_name = "N", default_value_t = wfhost_server::http::DEFAULT_MAX_WAITING)]
    max_waiting: usize,

    /// How long a client may take to send a request's headers, and a connection may sit idle
    /// between requests.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    header_timeout: Duration,

    /// How long a request that does not wait may take before it is answered 504.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    request_timeout: Duration,

    /// Threads answering HTTP (requests that read the store run on a pool beside them).
    #[arg(long, value_name = "N", default_value_t = 2)]
    http_threads: usize,
}

impl HttpArgs {
    /// The API with its token and limits, counting into `metrics`; none without --http.
    pub fn api(&self, metrics: &Metrics, max_module: usize) -> anyhow::Result<Option<Api>> {
        let Some(addr) = &self.http else {
            return Ok(None);
        };
        let token = super::target::token(self.token_file.as_deref())?;
        if let Some(path) = &self.token_file {
            warn_if_readable_by_others(path);
        }
        check_exposure(addr, token.is_some())?;
        let mut api = Api::new(None)
            .metrics(metrics)
            .max_body(self.max_body)
            .max_module(max_module)
            .max_wait(self.max_wait)
            .max_waiting(self.max_waiting)
            .request_timeout(self.request_timeout);
        if let Some(token) = &token {
            api = api.token(token)?;
        }
        Ok(Some(api))
    }

    /// Whether --http is given.
    pub fn given(&self) -> bool {
        self.http.is_some()
    }

    /// Checks what can be checked without listening: the token file, the address's exposure,
    /// the TLS certificate and key.
    pub fn check(&self, max_module: usize) -> anyhow::Result<()> {
        self.api(&Metrics::new(), max_module)?;
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            Tls::from_pem_files(cert, key)?;
        }
        Ok(())
    }

    /// Serves `api` on --http's address.
    pub fn serve(&self, api: &Api) -> anyhow::Result<Serving> {
        let addr = self.http.as_deref().unwrap_or_default();
        let listener = bind(addr)?;
        let mut options = ServeOptions::new()
            .max_connections(self.max_connections)
            .header_timeout(self.header_timeout)
            .threads(self.http_threads);
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            options = options.tls(Tls::from_pem_files(cert, key)?);
        }
        let serving = api.serve(listener, options)?;
        let scheme = if self.tls_cert.is_some() {
            "https"
        } else {
            "http"
        };
        eprintln!(
            "wfhost: the HTTP API listens on {scheme}://{}",
            serving.local_addr()
        );
        Ok(serving)
    }
}

/// Serving metrics only (`wfhost run --metrics`).
#[derive(Debug, clap::Args)]
pub struct MetricsArgs {
    /// Serve the host's metrics (Prometheus) at http://ADDR/metrics while it runs, e.g.
    /// 127.0.0.1:9090. Loopback only unless WFHOST_TOKEN holds a token scrapers send.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
}

impl MetricsArgs {
    /// Whether metrics are to be served.
    pub fn requested(&self) -> bool {
        self.metrics.is_some()
    }

    /// Serves `metrics` at --metrics' address, if given.
    pub fn serve(&self, metrics: &Metrics) -> anyhow::Result<Option<Serving>> {
        let Some(addr) = &self.metrics else {
            return Ok(None);
        };
        let token = super::target::token(None)?;
        check_exposure(addr, token.is_some())?;
        let mut api = Api::new(None).metrics(metrics);
        if let Some(token) = &token {
            api = api.token(token)?;
        }
        let serving = api.serve(bind(addr)?, ServeOptions::new().threads(1))?;
        eprintln!("wfhost: metrics at http://{}/metrics", serving.local_addr());
        Ok(Some(serving))
    }
}

/// Warns when others than the file's owner may read the token file.
fn warn_if_readable_by_others(path: &std::path::Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        if let Ok(metadata) = std::fs::metadata(path) {
            if metadata.permissions().mode() & 0o077 != 0 {
                eprintln!(
                    "wfhost: warning: the token file {} may be read by others than its owner \
                     (chmod 600 it): whoever reads it can run code on this server",
                    path.display()
                );
            }
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

/// The addresses `addr` names.
fn resolve(addr: &str) -> anyhow::Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .with_context(|| {
            format!("'{addr}' is not an address to listen on: give HOST:PORT, e.g. 127.0.0.1:8080")
        })?
        .collect();
    if addrs.is_empty() {
        bail!("'{addr}' names no address to listen on");
    }
    Ok(addrs)
}

/// Refuses to listen beyond this machine without a token: anyone who reached the port could
/// start, message and cancel workflows.
fn check_exposure(addr: &str, token: bool) -> anyhow::Result<()> {
    if token {
        return Ok(());
    }
    let exposed: Vec<SocketAddr> = resolve(addr)?
        .into_iter()
        .filter(|addr| !addr.ip().is_loopback())
        .collect();
    if let Some(exposed) = exposed.first() {
        bail!(
            "{addr} ({exposed}) listens beyond this machine, and without a token anyone who \
             reaches it could start, message and cancel workflows: give a token (--token-file \
             FILE, or WFHOST_TOKEN), or listen on loopback (127.0.0.1:PORT)"
        );
    }
    Ok(())
}

/// A socket listening on `addr`.
fn bind(addr: &str) -> anyhow::Result<TcpListener> {
    let addrs = resolve(addr)?;
    TcpListener::bind(&addrs[..]).with_context(|| format!("cannot listen on {addr}"))
}
