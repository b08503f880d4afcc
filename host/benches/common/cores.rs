//! The scaling curve: `--cores 2,4,8,16` runs the bench once per core count, each time in a child
//! process pinned to that many cores (`sched_setaffinity`, before any thread starts, so the
//! scheduler sizes itself to them), and prints the child's lines prefixed with `cores=N`.

use std::process::Command;

/// The environment variable a pinned child reads: how many cores to keep.
const PIN: &str = "WFHOST_BENCH_CORES";

/// The core counts asked for with `--cores 2,4,8`, if any.
fn asked(args: &[String]) -> Option<Vec<usize>> {
    let at = args.iter().position(|a| a == "--cores")?;
    let list = args
        .get(at + 1)
        .expect("--cores takes a list, e.g. --cores 2,4,8,16");
    Some(
        list.split(',')
            .map(|n| {
                n.trim()
                    .parse()
                    .expect("--cores takes numbers, e.g. 2,4,8,16")
            })
            .collect(),
    )
}

/// Call first in `main`. In a pinned child, pins this process and returns false (go on). With
/// `--cores`, runs a pinned child per core count, prints their lines, and returns true (done).
/// Otherwise returns false.
pub fn per_core_count(args: &[String]) -> bool {
    if let Some(cores) = std::env::var(PIN).ok().and_then(|n| n.parse().ok()) {
        pin(cores);
        return false;
    }
    let Some(counts) = asked(args) else {
        return false;
    };
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    let exe = std::env::current_exe().expect("bench binary path");
    let mut rest = Vec::new();
    let mut skip = false;
    for arg in args {
        if std::mem::take(&mut skip) {
            continue;
        }
        if arg == "--cores" {
            skip = true;
        } else {
            rest.push(arg.clone());
        }
    }
    for cores in counts {
        if cores == 0 || cores > available {
            println!("cores={cores}: skipped: this machine has {available} cores");
            continue;
        }
        let output = Command::new(&exe)
            .args(&rest)
            .env(PIN, cores.to_string())
            .output()
            .expect("run a pinned child");
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            println!("cores={cores} {line}");
        }
        if !output.status.success() {
            println!(
                "cores={cores}: failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
    }
    true
}

/// Keeps this process (and the threads and children it starts) on the first `cores` CPUs it may
/// run on.
fn pin(cores: usize) {
    // SAFETY: `cpu_set_t` is plain data; zeroed is the empty set.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a set of the size given.
    let got = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut allowed) };
    assert_eq!(got, 0, "sched_getaffinity failed");
    // SAFETY: as above.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let mut kept = 0;
    for cpu in 0..libc::CPU_SETSIZE as usize {
        if kept == cores {
            break;
        }
        // SAFETY: `cpu` is below CPU_SETSIZE.
        if unsafe { libc::CPU_ISSET(cpu, &allowed) } {
            // SAFETY: as above.
            unsafe { libc::CPU_SET(cpu, &mut set) };
            kept += 1;
        }
    }
    assert_eq!(kept, cores, "fewer than {cores} cores to pin to");
    // SAFETY: a valid set of the size given, for this process.
    let set_ok = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) };
    assert_eq!(set_ok, 0, "sched_setaffinity failed");
}
