//! wfhost's store: where a durable host keeps its workflows, what it is given to write ([`Op`]s,
//! a batch to a transaction) and what it reads back, behind one trait per role (`roles.rs`): the
//! journal every host writes, the cluster only a store hosts share has, and the client's writes.
//! SQLite (`sqlite/`) is the embedded default; PostgreSQL (`postgres/`) is the store many hosts
//! share. The engine (crate `wfhost`) sees only the traits.
//!
//! The store's files are opened only by SQLite: closing another descriptor of the database would
//! drop SQLite's locks on it (see `sqlite/mod.rs`).
#![deny(missing_docs)]

mod error;
mod location;
mod ops;
mod postgres;
mod redact;
mod roles;
mod rows;
#[cfg(feature = "testing")]
pub mod shape;
mod sqlite;
mod sync;
pub mod tasks;
pub mod time;

pub use error::{StoreError, StoreErrorKind, StoreResult};
pub use location::{ClientStore, HostStore, Location, Open};
pub use ops::{
    Ending, HostMessage, NewMessage, NewSnapshot, NewStep, NewWorkflow, Op, Reset, ScheduleAdvance,
    ScheduleRow,
};
pub use postgres::{PgStore, PgTaskBoard};
pub use redact::redact;
pub use roles::{
    Cluster, Committed, Filter, Held, Journal, PruneCandidate, PruneFilter, Read, StateCounts,
    Submit,
};
pub use rows::{Cancel, HostInfo, HostRow, ModuleName, State, Step, StoredMessage, Workflow};
pub use sqlite::{Holder, SqliteStore};
pub use sync::SyncMode;

/// What a store calls when there is work for hosts ([`Cluster::listen`]).
pub type Wake = std::sync::Arc<dyn Fn() + Send + Sync>;

/// The failure kind a cancelled workflow ends with (the scheduler's `FailureKind::Cancelled`;
/// the engine's tests hold the two to one name): the store counts and lists those apart.
pub const CANCELLED: &str = "cancelled";
