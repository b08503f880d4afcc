//! What a workload costs the operating system, counted around it: minor page faults, voluntary and
//! involuntary context switches and system and user time (`getrusage` of this process), and
//! TLB-shootdown interrupts (the `TLB` line of `/proc/interrupts`, all CPUs: other processes'
//! count too, so run on a quiet machine). Printed per unit of work (per spawn, per hop).

use std::time::Duration;

/// Counts at one moment.
#[derive(Clone, Copy, Debug)]
pub struct Usage {
    minor_faults: i64,
    voluntary: i64,
    involuntary: i64,
    user: Duration,
    system: Duration,
    tlb: Option<u64>,
}

impl Usage {
    pub fn now() -> Usage {
        // SAFETY: `rusage` is plain data, filled by the call.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a valid pointer for this process's usage.
        let ok = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
        assert_eq!(ok, 0, "getrusage failed");
        let time = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
        };
        Usage {
            minor_faults: usage.ru_minflt,
            voluntary: usage.ru_nvcsw,
            involuntary: usage.ru_nivcsw,
            user: time(usage.ru_utime),
            system: time(usage.ru_stime),
            tlb: tlb_shootdowns(),
        }
    }

    /// The counts since `earlier`, per `units` of work: `faults=.. vcsw=.. ivcsw=.. tlb=..
    /// sys/user=..s/..s`.
    pub fn since(&self, earlier: &Usage, units: u64) -> String {
        let per = |n: i64| n as f64 / units.max(1) as f64;
        let tlb = match (self.tlb, earlier.tlb) {
            (Some(now), Some(then)) => format!("{:.2}", per((now - then) as i64)),
            _ => "n/a".into(),
        };
        format!(
            "faults={:.2} vcsw={:.2} ivcsw={:.2} tlb={tlb} sys/user={:.2}s/{:.2}s",
            per(self.minor_faults - earlier.minor_faults),
            per(self.voluntary - earlier.voluntary),
            per(self.involuntary - earlier.involuntary),
            (self.system - earlier.system).as_secs_f64(),
            (self.user - earlier.user).as_secs_f64(),
        )
    }
}

/// TLB-shootdown interrupts so far, summed over CPUs; `None` where `/proc/interrupts` has no such
/// line.
fn tlb_shootdowns() -> Option<u64> {
    let interrupts = std::fs::read_to_string("/proc/interrupts").ok()?;
    let line = interrupts
        .lines()
        .find(|line| line.trim_start().starts_with("TLB:"))?;
    Some(
        line.split_whitespace()
            .skip(1)
            .map_while(|n| n.parse::<u64>().ok())
            .sum(),
    )
}
