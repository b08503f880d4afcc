//! How many connections the process's open files leave room for. Each connection is a file
//! descriptor; a server asked for more connections than the process may open files fails its
//! accepts past the limit (`EMFILE`), and the clients past it hang with no answer. So the cap on
//! connections is worked out from the limit (raised first as far as the hard limit lets), less
//! the descriptors open already and a reserve for what else the process opens (store
//! connections, outbound calls, module files, workers), and a client past it gets `503`.

use std::time::{Duration, Instant};

/// What the open-file limit leaves for connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Room {
    /// Connections the server takes at once.
    pub(crate) connections: usize,
    /// The process's open-file limit (after raising it).
    pub(crate) limit: u64,
    /// Descriptors open when it was worked out.
    pub(crate) in_use: u64,
    /// Kept for everything else.
    pub(crate) reserve: u64,
}

/// The descriptors kept back from connections: an eighth of the limit, 64 to 1,024.
fn reserve(limit: u64) -> u64 {
    (limit / 8).clamp(64, 1_024)
}

/// Raises the open-file limit toward what `wanted` connections need (the hard limit at most) and
/// says how many connections fit.
pub(crate) fn room_for(wanted: usize) -> Room {
    let in_use = open_descriptors();
    let wanted = u64::try_from(wanted.max(1)).unwrap_or(u64::MAX);
    let need = wanted.saturating_add(in_use);
    let limit = raise_limit(need.saturating_add(reserve(need)));
    room_within(wanted, limit, in_use)
}

/// The room `limit` leaves for `wanted` connections with `in_use` descriptors open: the reserve
/// is the one a limit of what they need would keep, or the limit's own when it is smaller.
fn room_within(wanted: u64, limit: u64, in_use: u64) -> Room {
    let reserve = reserve(limit.min(wanted.saturating_add(in_use)));
    let free = limit.saturating_sub(in_use).saturating_sub(reserve).max(1);
    Room {
        connections: usize::try_from(wanted.min(free)).unwrap_or(usize::MAX),
        limit,
        in_use,
        reserve,
    }
}

/// Descriptors open in this process now (64 where they cannot be counted).
fn open_descriptors() -> u64 {
    match std::fs::read_dir("/proc/self/fd") {
        // The directory's own descriptor is among them.
        Ok(entries) => (entries.count() as u64).saturating_sub(1),
        Err(_) => 64,
    }
}

/// Raises the soft limit on open files toward `wanted`, within the hard limit: the soft limit
/// after.
fn raise_limit(wanted: u64) -> u64 {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit and setrlimit with a valid resource and a pointer to a live rlimit.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                return u64::MAX;
            }
            let wanted = wanted as libc::rlim_t;
            if limit.rlim_cur < wanted {
                let raised = libc::rlimit {
                    rlim_cur: wanted.min(limit.rlim_max),
                    rlim_max: limit.rlim_max,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                    limit = raised;
                }
            }
            limit.rlim_cur
        }
    }
    #[cfg(not(unix))]
    {
        let _ = wanted;
        u64::MAX
    }
}

/// Failed accepts, and when the server tries again: out of descriptors (or of memory for a
/// socket), it waits longer each time, up to a second, and logs once in ten seconds.
pub(crate) struct Backoff {
    wait: Duration,
    failed: u64,
    told: Option<Instant>,
}

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff {
            wait: Duration::ZERO,
            failed: 0,
            told: None,
        }
    }

    /// An accept that worked: the waits start over.
    pub(crate) fn accepted(&mut self) {
        self.wait = Duration::ZERO;
    }

    /// An accept that failed with `error`: how long to wait before the next.
    pub(crate) fn failed(&mut self, error: &std::io::Error) -> Duration {
        self.failed += 1;
        let out_of_room = matches!(
            error.raw_os_error(),
            Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
        );
        if !out_of_room {
            // The client went away before it was taken (ECONNABORTED and the like).
            tracing::debug!("accepting a connection: {error}");
            return Duration::ZERO;
        }
        self.wait = (self.wait * 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
        if self
            .told
            .is_none_or(|told| told.elapsed() >= Duration::from_secs(10))
        {
            tracing::warn!(
                "accepting connections fails ({error}; {} times so far): the process is out \
                 of file descriptors for what it opens besides connections; lower \
                 --max-connections or raise the limit on open files (ulimit -n, LimitNOFILE=)",
                self.failed
            );
            self.told = Some(Instant::now());
        }
        self.wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_room_is_the_limit_less_what_is_open_and_a_reserve() {
        // A hard limit of 20,000 and the default 20,000 connections: not all fit.
        let room = room_within(20_000, 20_000, 40);
        assert_eq!(room.reserve, 1_024);
        assert_eq!(room.connections, 20_000 - 40 - 1_024);
        // Plenty: what was asked.
        assert_eq!(room_within(20_000, 1_048_576, 40).connections, 20_000);
        // Exactly what a thousand need, as `room_for` raises the limit: all of them.
        assert_eq!(room_within(1_000, 1_040 + 130, 40).connections, 1_000);
        assert_eq!(
            room_within(u64::MAX, u64::MAX, 40).connections,
            usize::MAX - 1_064
        );
        // A small limit keeps a small reserve, and always room for one.
        let small = room_within(20_000, 300, 50);
        assert_eq!((small.reserve, small.connections), (64, 186));
        assert_eq!(room_within(10, 60, 50).connections, 1);
    }

    #[test]
    fn accepts_out_of_descriptors_back_off_to_a_second() {
        let mut backoff = Backoff::new();
        let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
        let waits: Vec<u128> = (0..9)
            .map(|_| backoff.failed(&emfile).as_millis())
            .collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        backoff.accepted();
        assert_eq!(backoff.failed(&emfile).as_millis(), 10);
        let aborted = std::io::Error::from_raw_os_error(libc::ECONNABORTED);
        assert_eq!(backoff.failed(&aborted), Duration::ZERO);
    }
}
