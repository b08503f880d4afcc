//! `cargo run -p wfhost-chaos -- --seeds 200`: many seeds of the randomized history
//! check (see the library), on SQLite and PostgreSQL in turn, with a line per seed and the
//! totals; exit code 1 if any seed found a violation (each printed with the command that
//! replays its seed).

use std::path::PathBuf;
use std::process::ExitCode;

use wfhost_chaos::{run, wfhost_beside, Config, Report, Store};

struct Args {
    seeds: u64,
    from: u64,
    stores: Vec<Store>,
    operations: usize,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        seeds: 200,
        from: 1,
        stores: vec![Store::Sqlite, Store::Postgres],
        operations: 80,
    };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let mut value = || given.next().ok_or_else(|| format!("{flag} takes a value"));
        let number = |text: String| {
            text.parse::<u64>()
                .map_err(|_| format!("{flag} takes a number, not '{text}'"))
        };
        match flag.as_str() {
            "--seeds" => args.seeds = number(value()?)?,
            "--from" => args.from = number(value()?)?,
            "--operations" => args.operations = number(value()?)? as usize,
            "--store" => {
                args.stores = match value()?.as_str() {
                    "sqlite" => vec![Store::Sqlite],
                    "postgres" => vec![Store::Postgres],
                    "both" => vec![Store::Sqlite, Store::Postgres],
                    other => return Err(format!("--store sqlite|postgres|both, not '{other}'")),
                }
            }
            "-h" | "--help" => {
                return Err("usage: wfhost-chaos [--seeds N] [--from SEED] [--store \
                            sqlite|postgres|both] [--operations N]"
                    .into())
            }
            other => return Err(format!("unknown argument '{other}' (see --help)")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(why) => {
            eprintln!("{why}");
            return ExitCode::from(2);
        }
    };
    let program = std::env::current_exe().unwrap_or_default();
    let wfhost = match wfhost_beside(&program) {
        Ok(wfhost) => wfhost,
        Err(why) => {
            eprintln!("{why}");
            return ExitCode::from(2);
        }
    };
    let base = std::env::temp_dir().join(format!("wfhost-chaos-{}", std::process::id()));
    let mut reports: Vec<(Store, Report)> = Vec::new();
    let mut failed = Vec::new();
    for seed in args.from..args.from + args.seeds {
        let store = args.stores[(seed as usize) % args.stores.len()];
        let config = Config {
            wfhost: wfhost.clone(),
            store,
            seed,
            operations: args.operations,
            dir: base.join(format!("{}-{seed}", store.name())),
        };
        match run(&config) {
            Ok(report) => {
                println!(
                    "seed {seed} {}: {} operations, {} faults, {} workflows, {} violations ({:.1} s)",
                    store.name(),
                    report.operations_done(),
                    report.faults_injected(),
                    report.workflows,
                    report.violations.len(),
                    report.took.as_secs_f64()
                );
                for violation in &report.violations {
                    println!("  violation: {violation}");
                }
                if !report.violations.is_empty() {
                    failed.push((seed, store));
                } else {
                    let _ = std::fs::remove_dir_all(&config.dir);
                }
                reports.push((store, report));
            }
            Err(why) => {
                println!(
                    "seed {seed} {}: the run could not go on: {why}",
                    store.name()
                );
                failed.push((seed, store));
            }
        }
    }
    summarize(&reports);
    if failed.is_empty() {
        return ExitCode::SUCCESS;
    }
    for (seed, store) in failed {
        println!(
            "replay: cargo run -p wfhost-chaos -- --from {seed} --seeds 1 --store {} \
             --operations {}  (its files: {})",
            store.name(),
            args.operations,
            base.join(format!("{}-{seed}", store.name())).display()
        );
    }
    ExitCode::FAILURE
}

/// The totals, by store: seeds, operations, faults by kind, violations.
fn summarize(reports: &[(Store, Report)]) {
    for store in [Store::Sqlite, Store::Postgres] {
        let of: Vec<&Report> = reports
            .iter()
            .filter(|(s, _)| *s == store)
            .map(|(_, r)| r)
            .collect();
        if of.is_empty() {
            continue;
        }
        let mut faults = std::collections::BTreeMap::new();
        for report in &of {
            for (kind, n) in &report.faults {
                *faults.entry(*kind).or_insert(0u64) += n;
            }
        }
        let operations: u64 = of.iter().map(|r| r.operations_done()).sum();
        let acked: u64 = of
            .iter()
            .flat_map(|r| r.operations.values())
            .map(|(_, acked)| acked)
            .sum();
        let violations: usize = of.iter().map(|r| r.violations.len()).sum();
        let workflows: usize = of.iter().map(|r| r.workflows).sum();
        let took: f64 = of.iter().map(|r| r.took.as_secs_f64()).sum();
        println!(
            "{}: {} seeds, {operations} operations ({acked} acknowledged), {workflows} workflows, \
             faults {faults:?}, violations: {violations} ({took:.0} s)",
            store.name(),
            of.len()
        );
    }
    let _ = PathBuf::new();
}
