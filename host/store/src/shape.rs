//! The shape both stores keep their journal in: the tables and columns every store has, and
//! the indexes its reads rely on. Each store writes its own schema (`sqlite/schema.rs`,
//! `postgres/schema.rs`); a test reads both back and holds them to this description, so they
//! cannot drift apart.

use std::collections::BTreeMap;

/// The journal's tables and the columns each store keeps in them (a store may keep more: the
/// PostgreSQL store's ownership and claim columns, the SQLite store's log).
pub const TABLES: &[(&str, &[&str])] = &[
    ("modules", &["hash", "bytes"]),
    ("module_names", &["name", "version", "hash", "at"]),
    (
        "workflows",
        &[
            "num",
            "id",
            "parent",
            "module",
            "module_name",
            "entry",
            "input",
            "started",
            "state",
            "result",
            "error_kind",
            "error",
            "finished",
            "cancel",
            "damaged",
            "paused",
            "run",
            "trace",
        ],
    ),
    ("steps", &["num", "seq", "at", "record"]),
    (
        "messages",
        &["id", "receiver", "sender", "payload", "refused"],
    ),
    ("counters", &["name", "value"]),
    ("snapshots", &["num", "seq", "module", "state"]),
    ("outbox", &["num", "tag", "at", "payload"]),
    // Kept by triggers as workflows start, end and go (PostgreSQL keeps the changes apart
    // until a read folds them in).
    ("workflow_counts", &["entry", "state", "cancelled", "n"]),
];

/// The indexes every store keeps, by name: the table and the columns.
pub const INDEXES: &[(&str, &str, &[&str])] = &[
    // Unfinished workflows, by number: recovery and claims read them in that order.
    ("workflows_running", "workflows", &["num"]),
    // The messages waiting for a workflow, and a workflow's unread count.
    ("messages_receiver", "messages", &["receiver"]),
    // A workflow's children, in order: the web UI's page of a workflow lists them.
    ("workflows_children", "workflows", &["parent", "num"]),
    // Finished top-level workflows in the order they finished: what a prune removes.
    ("workflows_finished", "workflows", &["finished", "num"]),
    // The workflows of a module: a prune removes a module no workflow uses.
    ("workflows_module", "workflows", &["module"]),
    // Unfinished workflows that are paused or damaged, by entry point: counted and listed apart.
    ("workflows_held", "workflows", &["entry"]),
];

/// A store's schema as it reads back: tables with their columns, indexes with their table and
/// columns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    /// Columns by table.
    pub tables: BTreeMap<String, Vec<String>>,
    /// (table, columns) by index name.
    pub indexes: BTreeMap<String, (String, Vec<String>)>,
}

impl Shape {
    /// What this shape lacks of the journal's description, in words: nothing when it has it all.
    pub fn lacks(&self) -> Vec<String> {
        let mut lacks = Vec::new();
        for (table, columns) in TABLES {
            match self.tables.get(*table) {
                None => lacks.push(format!("table {table}")),
                Some(have) => lacks.extend(
                    columns
                        .iter()
                        .filter(|c| !have.iter().any(|h| h == *c))
                        .map(|c| format!("column {table}.{c}")),
                ),
            }
        }
        for (name, table, columns) in INDEXES {
            let want = (
                table.to_string(),
                columns.iter().map(|c| c.to_string()).collect(),
            );
            if self.indexes.get(*name) != Some(&want) {
                lacks.push(format!(
                    "index {name} on {table}({}), found {:?}",
                    columns.join(", "),
                    self.indexes.get(*name)
                ));
            }
        }
        lacks
    }
}
