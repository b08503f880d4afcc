//! The `wfhost` command-line tool (`src/main.rs`), and what it shares with other tools: building
//! workflow crates ([`build::build_workflow`]), which runs cargo, and so runs the crates' build
//! scripts natively. Building is for a workflow's authors; a host that runs code nobody trusts
//! loads built modules, as the `wfhost` library does.
#![deny(missing_docs)]

pub mod build;
