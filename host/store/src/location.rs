//! Where a store is: a SQLite file, or a PostgreSQL database given by its URL.

use std::fmt;
use std::path::{Path, PathBuf};

use super::{
    Cluster, Journal, PgStore, Read, SqliteStore, StoreError, StoreErrorKind, StoreResult, Submit,
    SyncMode,
};
use crate::redact::redact;

/// Where a store is. A string that starts with `postgres://` or `postgresql://` is a PostgreSQL
/// connection URL; one that starts with `http://` or `https://` is the HTTP API of a `wfhost
/// serve --http` (for clients only: a host journals to a store); anything else is the path of a
/// SQLite file (write `./postgres:...` for a file whose name would read as a URL).
#[derive(Clone, PartialEq, Eq)]
pub enum Location {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL database: its connection URL
    /// (`postgres://user:password@host:port/database?options`).
    Postgres(String),
    /// The HTTP API of a `wfhost serve --http`: its URL (`http://host:port`). Only a
    /// client (`wfhost::Client`) opens it.
    Server(String),
}

impl Location {
    /// Reads a location as the `--store` option gives it.
    pub fn parse(text: &str) -> Location {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            Location::Postgres(text.to_string())
        } else if text.starts_with("http://") || text.starts_with("https://") {
            Location::Server(text.to_string())
        } else {
            Location::Sqlite(PathBuf::from(text))
        }
    }

    /// The SQLite file, if that is what it is.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Location::Sqlite(path) => Some(path),
            Location::Postgres(_) | Location::Server(_) => None,
        }
    }
}

/// Opening the store at a [`Location`]: what the engine (and wfhost's own tests) do, not what
/// an application that embeds the engine does (it gives the location to a `HostBuilder` or a
/// `Client`). A trait so that these stay out of reach of code that does not import it.
pub trait Open {
    /// Opens the store as a host does (creating and migrating it if need be), synced as `sync`
    /// says. A SQLite file is held by one host at a time: it is refused while another holds it.
    #[cfg(feature = "testing")]
    fn open(&self, sync: SyncMode) -> StoreResult<Box<dyn Journal>>;

    /// Opens the store as a host does, its file capped at `limit` bytes (SQLite only): its
    /// journal, and on a store hosts share the connection its cluster role goes through.
    fn open_host(&self, sync: SyncMode, limit: Option<u64>) -> StoreResult<HostStore>;

    /// Opens the store only if it exists, to read it beside the hosts that run it: a SQLite
    /// file that is there, or a PostgreSQL database that has wfhost's tables.
    fn open_existing(&self) -> StoreResult<Box<dyn Journal>>;

    /// Opens the store for a client: what it reads, and, on a store hosts share, what it
    /// writes for them (with `create`, its tables are made if need be).
    fn open_client(&self, create: bool) -> StoreResult<ClientStore>;
}

impl Open for Location {
    /// Opens the store as a host does (creating and migrating it if need be), synced as `sync`
    /// says. A SQLite file is held by one host at a time: it is refused while another holds it.
    #[cfg(feature = "testing")]
    fn open(&self, sync: SyncMode) -> StoreResult<Box<dyn Journal>> {
        Ok(self.open_host(sync, None)?.journal)
    }

    /// Opens the store as a host does, its file capped at `limit` bytes (SQLite only): its
    /// journal, and on a store hosts share the connection its cluster role goes through.
    fn open_host(&self, sync: SyncMode, limit: Option<u64>) -> StoreResult<HostStore> {
        match (self, limit) {
            (Location::Sqlite(path), limit) => {
                let mut store = SqliteStore::open(path, sync)?;
                if let Some(bytes) = limit {
                    store.limit_size(bytes)?;
                }
                Ok(HostStore {
                    journal: Box::new(store),
                    cluster: None,
                })
            }
            (Location::Postgres(_), Some(_)) => Err(StoreError::new(
                StoreErrorKind::Invalid,
                "a size limit applies to a SQLite store only: limit a PostgreSQL database's size \
                 in PostgreSQL",
            )),
            (Location::Postgres(url), None) => {
                let store = PgStore::open(url, sync)?;
                let cluster: Box<dyn Cluster> = store.connection()?;
                Ok(HostStore {
                    journal: Box::new(store),
                    cluster: Some(cluster),
                })
            }
            (Location::Server(url), _) => Err(not_a_store(url)),
        }
    }

    /// Opens the store only if it exists, to read it beside the hosts that run it: a SQLite
    /// file that is there, or a PostgreSQL database that has wfhost's tables. For commands that
    /// read what a host wrote.
    fn open_existing(&self) -> StoreResult<Box<dyn Journal>> {
        match self {
            Location::Sqlite(path) => Ok(Box::new(SqliteStore::open_existing(path)?)),
            Location::Postgres(url) => Ok(Box::new(PgStore::open_existing(url)?)),
            Location::Server(url) => Err(not_a_store(url)),
        }
    }

    /// Opens the store for a client: what it reads, and, on a store hosts share, what it
    /// writes for them (with `create`, its tables are made if need be; without, they must be
    /// there). A SQLite file is read beside its one host, which takes work only from its own
    /// application.
    fn open_client(&self, create: bool) -> StoreResult<ClientStore> {
        Ok(match self {
            Location::Sqlite(path) => ClientStore::Own(Box::new(SqliteStore::open_existing(path)?)),
            Location::Postgres(url) if create => {
                ClientStore::Shared(Box::new(PgStore::open(url, SyncMode::Full)?))
            }
            Location::Postgres(url) => ClientStore::Shared(Box::new(PgStore::open_existing(url)?)),
            Location::Server(url) => return Err(not_a_store(url)),
        })
    }
}

/// What a host (or a command that reads a store itself) is told of a server's URL.
fn not_a_store(url: &str) -> StoreError {
    StoreError::new(
        StoreErrorKind::Invalid,
        format_args!(
        "{} is a server's HTTP API, not a store: a host keeps its journal in a SQLite file or a \
         PostgreSQL database (give that), and clients reach the server with --server",
        redact(url)
    ),
    )
}

/// A store as a host opens it.
pub struct HostStore {
    /// What it journals with.
    pub journal: Box<dyn Journal>,
    /// On a store hosts share: what it joins, renews, claims and takes with.
    pub cluster: Option<Box<dyn Cluster>>,
}

/// A store as a client opens it.
pub enum ClientStore {
    /// One host's own (a SQLite file): read only, beside it.
    Own(Box<dyn Read>),
    /// A store hosts share: read, and written for them.
    Shared(Box<dyn Submit>),
}

impl fmt::Debug for HostStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostStore")
            .field("shared", &self.cluster.is_some())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for ClientStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClientStore::Own(_) => "ClientStore::Own",
            ClientStore::Shared(_) => "ClientStore::Shared",
        })
    }
}

/// The location as the user wrote it, any password in a URL replaced by `***`.
impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Sqlite(path) => write!(f, "{}", path.display()),
            Location::Postgres(url) | Location::Server(url) => f.write_str(&redact(url)),
        }
    }
}

impl fmt::Debug for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Location({self})")
    }
}

impl From<PathBuf> for Location {
    fn from(path: PathBuf) -> Location {
        match path.to_str() {
            Some(text) => Location::parse(text),
            None => Location::Sqlite(path),
        }
    }
}

impl From<&Path> for Location {
    fn from(path: &Path) -> Location {
        Location::from(path.to_path_buf())
    }
}

impl From<&PathBuf> for Location {
    fn from(path: &PathBuf) -> Location {
        Location::from(path.clone())
    }
}

impl From<&str> for Location {
    fn from(text: &str) -> Location {
        Location::parse(text)
    }
}

impl From<String> for Location {
    fn from(text: String) -> Location {
        Location::parse(&text)
    }
}

impl From<&Location> for Location {
    fn from(location: &Location) -> Location {
        location.clone()
    }
}

impl std::str::FromStr for Location {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Location, Self::Err> {
        Ok(Location::parse(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_postgres_and_the_rest_are_files() {
        assert_eq!(
            Location::parse("postgres://u@h/db"),
            Location::Postgres("postgres://u@h/db".into())
        );
        assert_eq!(
            Location::parse("postgresql://h/db"),
            Location::Postgres("postgresql://h/db".into())
        );
        assert_eq!(
            Location::parse("wf.db"),
            Location::Sqlite(PathBuf::from("wf.db"))
        );
        assert_eq!(
            Location::parse("./postgres://x"),
            Location::Sqlite(PathBuf::from("./postgres://x"))
        );
    }

    #[test]
    fn passwords_are_never_shown() {
        assert_eq!(
            redact("postgres://app:s3cr@t@db.example:5432/wf?sslmode=disable&password=x"),
            "postgres://app:***@db.example:5432/wf?sslmode=disable&password=***"
        );
        assert_eq!(redact("postgres://app@db/wf"), "postgres://app@db/wf");
        assert_eq!(redact("postgres://db/wf"), "postgres://db/wf");
        assert_eq!(
            Location::parse("postgresql://a:b@h/d").to_string(),
            "postgresql://a:***@h/d"
        );
    }
}
