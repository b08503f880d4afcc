//! The store's clock, and times as its columns keep them.

/// Nanoseconds since the Unix epoch, by the system clock (0 before it; saturating far after).
pub fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Milliseconds since the Unix epoch, by the system clock.
pub fn now_millis() -> u64 {
    now_nanos() / 1_000_000
}

/// A time as a store keeps it, in a signed 64-bit column: `u64::MAX` (never) as the largest.
pub(crate) fn stored_time(t: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}

/// A time a store kept ([`stored_time`]).
pub(crate) fn time_read(t: i64) -> u64 {
    if t == i64::MAX {
        u64::MAX
    } else {
        u64::try_from(t).unwrap_or(0)
    }
}
