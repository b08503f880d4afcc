//! The workers' clock for time slices: cheap rather than fine. A worker reads it once per turn
//! (see `worker.rs`), and with steps of a few hundred nanoseconds a precise clock's reading was a
//! tenth of a step's cost. On Linux this is `CLOCK_MONOTONIC_COARSE`: the time of the last timer
//! tick, read without the hardware counter, to within a tick (1 to 4 ms; a kernel whose ticks are
//! further apart gets `Instant`). That is fine enough for a 10 ms slice, and the time turns are
//! charged stays right on average: a turn shorter than a tick reads as a whole tick as often as a
//! tick boundary falls inside it, and as nothing otherwise. Elsewhere it is `Instant`.

use std::time::Duration;

/// A reading of the clock: time since an arbitrary origin, the same for every thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Reading(Duration);

impl Reading {
    /// Time from `earlier` to this reading; zero if `earlier` is later.
    pub(crate) fn since(self, earlier: Reading) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

/// The coarse clock's ticks may be at most this far apart; a kernel with slower ticks (100 Hz)
/// gets the precise clock instead.
const COARSEST: Duration = Duration::from_millis(4);

/// Reads the clock.
#[cfg(target_os = "linux")]
pub(crate) fn now() -> Reading {
    use std::sync::OnceLock;
    static COARSE_WILL_DO: OnceLock<bool> = OnceLock::new();
    if !*COARSE_WILL_DO.get_or_init(|| coarse_resolution().is_some_and(|tick| tick <= COARSEST)) {
        return fine();
    }
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `time` is a valid, writable timespec; the clock id is a constant Linux defines.
    let failed = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut time) } != 0;
    if failed {
        return fine();
    }
    Reading(Duration::new(
        u64::try_from(time.tv_sec).unwrap_or(0),
        u32::try_from(time.tv_nsec).unwrap_or(0),
    ))
}

/// How far apart the coarse clock's ticks are, if the kernel says.
#[cfg(target_os = "linux")]
fn coarse_resolution() -> Option<Duration> {
    let mut resolution = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `resolution` is a valid, writable timespec; the clock id is a constant Linux defines.
    let failed = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut resolution) } != 0;
    if failed {
        return None;
    }
    Some(Duration::new(
        u64::try_from(resolution.tv_sec).ok()?,
        u32::try_from(resolution.tv_nsec).ok()?,
    ))
}

/// Reads the clock.
#[cfg(not(target_os = "linux"))]
pub(crate) fn now() -> Reading {
    fine()
}

/// `Instant`, measured from the first reading in the process.
fn fine() -> Reading {
    use std::sync::OnceLock;
    use std::time::Instant;
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    Reading(ORIGIN.get_or_init(Instant::now).elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_do_not_go_back_and_follow_real_time() {
        let first = now();
        let started = std::time::Instant::now();
        let mut last = first;
        // Until 20 ms have been read: several ticks of the coarsest clock.
        while last.since(first) < Duration::from_millis(20) {
            let reading = now();
            assert!(reading >= last, "{reading:?} after {last:?}");
            last = reading;
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the clock does not advance"
            );
        }
        // A coarse reading lags real time by at most a tick (4 ms at the coarsest).
        let real = started.elapsed();
        assert!(
            real + Duration::from_millis(5) >= last.since(first),
            "{real:?}"
        );
        assert_eq!(first.since(last), Duration::ZERO);
    }
}
