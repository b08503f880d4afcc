//! Where the client commands find the workflows: a store (`--store`, `WFHOST_STORE`), or a
//! `wfhost serve --http` server (`--server`, `WFHOST_SERVER`, its token from `WFHOST_TOKEN` or
//! `--token-file`).

use std::path::PathBuf;

use anyhow::{bail, Context as _};
use wfhost::store::Location;
use wfhost::Client;

/// A store, or a server.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// The store: a SQLite file or a PostgreSQL URL.
    #[arg(long, value_name = "STORE", env = "WFHOST_STORE")]
    store: Option<Location>,

    /// A `wfhost serve --http` server to ask instead of a store (http://HOST:PORT or https://...).
    #[arg(long, value_name = "URL", env = "WFHOST_SERVER")]
    server: Option<String>,

    /// With --server: a file holding the server's token. Default: the WFHOST_TOKEN variable.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,

    /// With an https:// server: trust the certificates in this PEM file (a server whose
    /// certificate no public authority signed).
    #[arg(long, value_name = "FILE", env = "WFHOST_CA_FILE")]
    ca_file: Option<PathBuf>,
}

impl Target {
    /// Where the workflows are, as given.
    pub fn location(&self) -> anyhow::Result<Location> {
        match (&self.store, &self.server) {
            (Some(_), Some(_)) => bail!(
                "give one of --store and --server, not both (are WFHOST_STORE and WFHOST_SERVER \
                 both set?)"
            ),
            (Some(store), None) => Ok(store.clone()),
            (None, Some(server)) => match Location::parse(server) {
                location @ Location::Server(_) => Ok(location),
                _ => bail!("--server {server} is not a server's address: give http://HOST:PORT"),
            },
            (None, None) => bail!(
                "where are the workflows? give --store (a SQLite file or a PostgreSQL URL) or \
                 --server (a `wfhost serve --http` server), or set WFHOST_STORE or WFHOST_SERVER"
            ),
        }
    }

    /// Whether the workflows are behind a server.
    pub fn is_server(&self) -> bool {
        self.server.is_some() && self.store.is_none()
    }

    /// A client of them. A `TRACEPARENT` in the environment (OpenTelemetry's carrier: a traced
    /// script's span) is the parent of the runs it starts.
    pub fn client(&self) -> anyhow::Result<Client> {
        let location = self.location()?;
        let mut client = Client::open(location);
        if let Ok(parent) = std::env::var("TRACEPARENT") {
            client = client.traced(&parent);
        }
        if self.is_server() {
            if let Some(token) = token(self.token_file.as_deref())? {
                client = client.with_token(&token);
            }
            if let Some(path) = &self.ca_file {
                let pem = std::fs::read(path)
                    .with_context(|| format!("cannot read --ca-file {}", path.display()))?;
                client = client.with_root_certificates(&pem)?;
            }
        }
        Ok(client)
    }
}

impl Target {
    /// A client of the server's HTTP API itself, for what only a server knows (its workers):
    /// an error naming `what` without --server.
    pub fn api(&self, what: &str) -> anyhow::Result<wfhost_client::Client> {
        let Some(server) = self.server.as_deref().filter(|_| self.store.is_none()) else {
            bail!("{what} are known to a server only: give --server URL (or set WFHOST_SERVER)");
        };
        let mut client = wfhost_client::Client::new(server)?;
        if let Some(token) = token(self.token_file.as_deref())? {
            client = client.with_token(token);
        }
        if let Some(path) = &self.ca_file {
            let pem = std::fs::read(path)
                .with_context(|| format!("cannot read --ca-file {}", path.display()))?;
            client = client.with_root_certificates(&pem)?;
        }
        Ok(client)
    }
}

/// The token in `file` (trimmed), or in the WFHOST_TOKEN variable; none if neither is given.
pub fn token(file: Option<&std::path::Path>) -> anyhow::Result<Option<String>> {
    let token = match file {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the token file {}", path.display()))?,
        None => match std::env::var("WFHOST_TOKEN") {
            Ok(token) => token,
            Err(_) => return Ok(None),
        },
    };
    let token = token.trim().to_string();
    if token.is_empty() {
        match file {
            Some(path) => bail!("the token file {} is empty", path.display()),
            // Set and empty is unset (see `main`); one of blanks only is a mistake.
            None => bail!("WFHOST_TOKEN holds only blanks: give the token, or unset it"),
        }
    }
    Ok(Some(token))
}
