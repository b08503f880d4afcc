//! One connection to the server: the client, the runtime that drives it, the statements
//! prepared on it, and what its errors mean.

use std::collections::HashMap;
use std::error::Error as _;

use tokio_postgres::{Client, NoTls, Statement};

use super::SyncMode;
use crate::StoreErrorKind;

/// A connection, the runtime that drives it, and the statements prepared on it.
pub(super) struct Conn {
    pub(super) runtime: tokio::runtime::Runtime,
    /// The server process behind the connection (`pg_backend_pid()`).
    pub(super) backend: i32,
    pub(super) client: Client,
    statements: HashMap<&'static str, Statement>,
}

impl Conn {
    /// Connects with `config`, commits synced as `sync` says.
    pub(super) fn open(
        config: &tokio_postgres::Config,
        sync: SyncMode,
    ) -> Result<Conn, ConnectError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ConnectError::Runtime)?;
        let (client, connection) = runtime.block_on(config.connect(NoTls))?;
        // Polled whenever the runtime runs, that is, while this connection is used.
        runtime.spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!("a store connection ended: {error}");
            }
        });
        let sync = match sync {
            SyncMode::Full => "on",
            SyncMode::Normal => "off",
        };
        let mut conn = Conn {
            runtime,
            backend: 0,
            client,
            statements: HashMap::new(),
        };
        conn.batch(&format!(
            "SET search_path TO wfhost; SET synchronous_commit TO {sync}"
        ))?;
        conn.backend = conn.query_one("SELECT pg_backend_pid()", &[])?.get(0);
        Ok(conn)
    }

    /// `sql`, prepared once per connection.
    pub(super) fn prepare(&mut self, sql: &'static str) -> Result<Statement, Error> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.runtime.block_on(self.client.prepare(sql))?;
        self.statements.insert(sql, statement.clone());
        Ok(statement)
    }

    /// Runs `work` on the connection, blocking this thread until it is done.
    pub(super) fn block_on<T>(&self, work: impl std::future::Future<Output = T>) -> T {
        self.runtime.block_on(work)
    }

    /// `sql` (prepared once), with `params`: its rows.
    pub(super) fn query(
        &mut self,
        sql: &'static str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, Error> {
        let statement = self.prepare(sql)?;
        self.runtime.block_on(self.client.query(&statement, params))
    }

    /// As [`query`](Self::query), for at most one row.
    pub(super) fn query_opt(
        &mut self,
        sql: &'static str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Option<tokio_postgres::Row>, Error> {
        let statement = self.prepare(sql)?;
        self.runtime
            .block_on(self.client.query_opt(&statement, params))
    }

    /// As [`query`](Self::query), for exactly one row.
    pub(super) fn query_one(
        &mut self,
        sql: &'static str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<tokio_postgres::Row, Error> {
        let statement = self.prepare(sql)?;
        self.runtime
            .block_on(self.client.query_one(&statement, params))
    }

    /// `sql`, statements without parameters, sent as one simple query.
    pub(super) fn batch(&self, sql: &str) -> Result<(), Error> {
        self.runtime.block_on(self.client.batch_execute(sql))
    }
}

pub(super) type Error = tokio_postgres::Error;

/// Whether `error` is the connection's, not the statement's: worth a reconnect and another try.
pub(super) fn retryable(error: &Error) -> bool {
    if error.is_closed() {
        return true;
    }
    match error.code() {
        // Connection exceptions, the server shutting down or starting, and transactions
        // rolled back for a serialization failure or a deadlock.
        Some(code) => {
            let code = code.code();
            code.starts_with("08")
                || matches!(code, "57P01" | "57P02" | "57P03" | "40001" | "40P01")
        }
        None => error
            .source()
            .is_some_and(|source| source.is::<std::io::Error>()),
    }
}

/// What kind of failure `error` is: the database's own codes for a full disk, a broken rule and
/// damage; anything else is the store being unavailable.
pub(super) fn kind_of(error: &Error) -> StoreErrorKind {
    match error.code().map(|code| code.code()) {
        // Disk full.
        Some("53100") => StoreErrorKind::Full,
        // Integrity constraint violations.
        Some(code) if code.starts_with("23") => StoreErrorKind::Integrity,
        // Data corrupted, index corrupted.
        Some("XX001" | "XX002") => StoreErrorKind::Damaged,
        _ => StoreErrorKind::Unavailable,
    }
}

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
pub(super) enum ConnectError {
    #[error("{}", describe(.0))]
    Postgres(#[from] Error),
    #[error("could not start the connection's runtime: {0}")]
    Runtime(std::io::Error),
}

/// An error as the server (or the connection) put it, with its detail when there is one.
pub(super) fn describe(error: &Error) -> String {
    match error.as_db_error() {
        Some(db) if *db.code() == tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE => {
            format!(
                "{}: the URL's user needs the privileges to use the schema wfhost and its \
                 tables (and, for a host on a new database, to create them): ask the \
                 database's owner to grant them, or give the owner's user",
                db.message()
            )
        }
        Some(db) => match db.detail() {
            Some(detail) => format!("{} ({detail})", db.message()),
            None => db.message().to_string(),
        },
        None => match error.source() {
            Some(source) => format!("{error}: {source}"),
            None => error.to_string(),
        },
    }
}
