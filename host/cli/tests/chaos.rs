//! The randomized history check (`wfhost-chaos`) on a few seeds, against the real binary: a
//! seeded mix of starts, messages, cancels, pauses, upgrades, prunes, a worker's polls and
//! completions and readers beside the hosts, with clean restarts, `kill -9` (between requests
//! and in the middle of one) and, on PostgreSQL, a second host and a host frozen past its lease;
//! then every acknowledged operation is checked against the store. A failing seed prints the
//! command that replays it; `cargo run -p wfhost-chaos -- --seeds 200` runs many.

use wfhost_chaos::{run, Config, Store};

fn check(store: Store, seeds: std::ops::Range<u64>) {
    for seed in seeds {
        let config = Config {
            wfhost: env!("CARGO_BIN_EXE_wfhost").into(),
            store,
            seed,
            operations: 60,
            dir: std::env::temp_dir().join(format!(
                "wfhost-chaos-test-{}-{}-{seed}",
                std::process::id(),
                store.name()
            )),
        };
        let report = run(&config).unwrap_or_else(|why| {
            panic!(
                "seed {seed} on {}: the run could not go on: {why}",
                store.name()
            )
        });
        assert!(
            report.violations.is_empty(),
            "seed {seed} on {} ({} operations, faults {:?}): {:#?}\nreplay: cargo run -p \
             wfhost-chaos -- --from {seed} --seeds 1 --store {} --operations 60",
            store.name(),
            report.operations_done(),
            report.faults,
            report.violations,
            store.name()
        );
        assert!(
            report.faults_injected() > 0,
            "seed {seed} injected no fault"
        );
        let _ = std::fs::remove_dir_all(&config.dir);
    }
}

#[test]
fn a_few_seeds_on_sqlite_keep_everything_acknowledged() {
    check(Store::Sqlite, 1..4);
}

#[test]
fn a_few_seeds_on_postgres_with_two_hosts_keep_everything_acknowledged() {
    check(Store::Postgres, 1..3);
}
