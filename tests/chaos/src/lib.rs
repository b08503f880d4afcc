//! Randomized history checking of wfhost, after FoundationDB's simulation tests and Jepsen's
//! checkers: a seeded generator drives real `wfhost serve` hosts through a random mix of
//! operations (starts, messages, cancels, pauses, upgrades, prunes, an activity worker's polls
//! and completions, read-only commands beside the hosts) and faults (clean restarts, `kill -9`
//! between requests and in the middle of one, and on PostgreSQL a second host and a host frozen
//! past its lease), records every answer, brings the hosts to rest, and checks the store's end
//! state against what was acknowledged (`check.rs`). A seed replays its run's choices (the
//! timing of what the hosts do between them is the machine's).
//!
//! `cargo test` runs a few seeds (`host/cli/tests/chaos.rs`); `cargo run -p wfhost-chaos -- --seeds
//! 200` runs many and prints the figures `BENCHMARKS.md` keeps.

mod check;
mod history;
mod host;
mod world;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use world::World;

/// The store a run uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    /// A SQLite file and one host.
    Sqlite,
    /// A PostgreSQL database (of a server the run starts) and two hosts.
    Postgres,
}

impl Store {
    /// `sqlite` or `postgres`.
    pub fn name(self) -> &'static str {
        match self {
            Store::Sqlite => "sqlite",
            Store::Postgres => "postgres",
        }
    }
}

/// One run.
#[derive(Clone, Debug)]
pub struct Config {
    /// The `wfhost` binary.
    pub wfhost: PathBuf,
    /// The store.
    pub store: Store,
    /// The seed of the generator.
    pub seed: u64,
    /// Operations and faults, in all.
    pub operations: usize,
    /// A directory of the run's own (the SQLite file, the hosts' logs).
    pub dir: PathBuf,
}

/// What a run did and found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Operations, by name: how many, and how many acknowledged.
    pub operations: BTreeMap<&'static str, (u64, u64)>,
    /// Faults injected, by name.
    pub faults: BTreeMap<&'static str, u64>,
    /// Workflows started (acknowledged or not).
    pub workflows: usize,
    /// What the engine promised and did not do.
    pub violations: Vec<String>,
    /// How long the run took.
    pub took: Duration,
}

impl Report {
    /// Operations in all.
    pub fn operations_done(&self) -> u64 {
        self.operations.values().map(|(n, _)| n).sum()
    }

    /// Faults in all.
    pub fn faults_injected(&self) -> u64 {
        self.faults.values().sum()
    }
}

/// How long the hosts may take, at rest, to end every workflow that can end.
const SETTLE: Duration = Duration::from_secs(120);

/// Runs one seed: the operations, then the hosts at rest, then the check. `Err` when the run
/// itself could not go on (a host that would not start): that is a failure too.
pub fn run(config: &Config) -> Result<Report, String> {
    let began = Instant::now();
    let _ = std::fs::remove_dir_all(&config.dir);
    std::fs::create_dir_all(&config.dir).map_err(|e| e.to_string())?;
    let store = match config.store {
        Store::Sqlite => config.dir.join("wf.db").display().to_string(),
        Store::Postgres => wfhost_test_programs::postgres::Postgres::shared()
            .database(&format!("chaos_{}", config.seed)),
    };
    let shared = config.store == Store::Postgres;
    let mut world = World::new(&config.wfhost, &store, &config.dir, shared, config.seed)?;
    for _ in 0..config.operations {
        world.step()?;
    }
    finish(&mut world)?;
    let history = std::mem::take(&mut world.history);
    Ok(Report {
        seed: config.seed,
        workflows: history.workflows.len(),
        operations: history.operations,
        faults: history.faults,
        violations: history.violations,
        took: began.elapsed(),
    })
}

/// Brings the hosts to rest, lets every workflow that can end end, and checks them all.
fn finish(world: &mut World) -> Result<(), String> {
    world.settle()?;
    let found = check::everything(&world.client())?;
    check::pauses(&mut world.history, &found);
    world.unpause_all();
    world.drain_tasks(Duration::from_millis(300));
    let unfinished: Vec<String> = found
        .iter()
        .filter(|(_, w)| !w.is_finished())
        .map(|(id, _)| id.clone())
        .collect();
    world.top_up(&unfinished);
    let deadline = Instant::now() + SETTLE;
    let found = loop {
        world.drain_tasks(Duration::from_millis(200));
        let found = check::everything(&world.client())?;
        if found.values().all(|w| w.is_finished()) || Instant::now() >= deadline {
            break found;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut ids: Vec<String> = world.history.workflows.keys().cloned().collect();
    ids.extend(found.keys().cloned());
    ids.sort();
    ids.dedup();
    for id in ids {
        let workflow = found.get(&id);
        check::workflow(&mut world.history, &id, workflow);
        if let Some(w) = workflow.filter(|w| !w.is_finished()) {
            world.history.violation(format!(
                "workflow {id} did not end in {SETTLE:?} at rest, though it could: it stands \
                 {} after {} steps",
                w.status, w.steps
            ));
        }
    }
    Ok(())
}

/// The `wfhost` binary beside this program's own (`target/<profile>/wfhost`), built with cargo
/// first if it is not there.
pub fn wfhost_beside(program: &Path) -> Result<PathBuf, String> {
    let dir = program
        .parent()
        .ok_or("this program has no directory")?
        .to_path_buf();
    // `deps/` holds test binaries; the binary sits one level up.
    let dir = if dir.ends_with("deps") {
        dir.parent().map(Path::to_path_buf).unwrap_or(dir)
    } else {
        dir
    };
    let wfhost = dir.join("wfhost");
    if !wfhost.exists() {
        let release = dir.ends_with("release");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut build = std::process::Command::new(cargo);
        build.args(["build", "-p", "wfhost-cli", "--bin", "wfhost"]);
        if release {
            build.arg("--release");
        }
        let status = build
            .status()
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        if !status.success() || !wfhost.exists() {
            return Err(format!(
                "the wfhost binary is not at {} and cargo could not build it",
                wfhost.display()
            ));
        }
    }
    Ok(wfhost)
}
