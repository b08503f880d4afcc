//! Durable workflows embedded in a Rust application: host calls across crashes, timers across a
//! restart, 10,000 waiting workflows brought back after a kill, replay against a changed module,
//! and a store that cannot be written.

mod durable {
    mod client;
    pub mod common;
    mod crashes;
    mod faults;
    mod guarantees;
    mod postgres;
    mod recovery;
    mod reset;
    mod restart;
    mod server;
    mod snapshots;
    mod store;
    mod upgrade;
}
