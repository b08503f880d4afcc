//! What the subcommands share: their common flags and the helpers that build a host, reach a
//! store or server, read input and show results. Subcommands import from here, never from each
//! other.

pub mod host;
pub mod http;
pub mod input;
pub mod limits;
pub mod outbound;
pub mod select;
pub mod show;
pub mod target;
pub mod units;
