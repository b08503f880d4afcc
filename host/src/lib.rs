//! wfhost: a WebAssembly workflow engine.
#![deny(missing_docs)]

pub use wfcontract as contract;
pub use wfhost_scheduler as scheduler;
