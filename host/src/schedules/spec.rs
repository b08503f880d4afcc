//! What a schedule says: when it fires (a cron expression in a time zone, or a fixed interval),
//! what it does when a firing finds the last one still running, what it does about firings
//! missed while no host ran, and how far each firing may be spread out.

use std::str::FromStr;
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};

/// When a schedule fires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum When {
    /// A cron expression, seconds first (`sec min hour day-of-month month day-of-week [year]`,
    /// as the `cron` crate reads it: `0 */5 * * * *` is every five minutes), in a time zone,
    /// read on its wall clock (how it fires where the clocks change: `schedules/firings.rs`).
    Cron {
        /// The expression.
        expression: String,
        /// An IANA time zone name (`Europe/Paris`), or `UTC`.
        zone: String,
    },
    /// Every `interval`, from the schedule's creation.
    Every(Duration),
}

impl When {
    /// A cron expression in `zone`, checked.
    pub fn cron(expression: &str, zone: &str) -> Result<When> {
        parse_cron(expression)?;
        parse_zone(zone)?;
        Ok(When::Cron {
            expression: expression.trim().to_string(),
            zone: zone.to_string(),
        })
    }

    /// Every `interval` (at least a second), checked.
    pub fn every(interval: Duration) -> Result<When> {
        if interval < Duration::from_secs(1) {
            return Err(bad(format!(
                "a schedule fires at most once a second: {interval:?} is too often"
            )));
        }
        Ok(When::Every(interval))
    }

    /// Checks what [`cron`](Self::cron) and [`every`](Self::every) check, for a value built by
    /// hand.
    pub(crate) fn check(&self) -> Result<()> {
        match self {
            When::Cron { expression, zone } => When::cron(expression, zone).map(drop),
            When::Every(interval) => When::every(*interval).map(drop),
        }
    }

    /// The shortest time between two firings from `now` on (its next two), to bound a jitter.
    pub(crate) fn gap_after(&self, now: u64) -> Option<u64> {
        let first = self.next_after(now, now)?;
        let second = self.next_after(first, now)?;
        Some(second - first)
    }

    /// As the store keeps it: `cron:<zone>:<expression>` or `every:<milliseconds>`.
    pub fn encode(&self) -> String {
        match self {
            When::Cron { expression, zone } => format!("cron:{zone}:{expression}"),
            When::Every(interval) => format!("every:{}", interval.as_millis()),
        }
    }

    /// Reads what [`encode`](Self::encode) wrote.
    pub fn decode(text: &str) -> Result<When> {
        if let Some(ms) = text.strip_prefix("every:") {
            let ms: u64 = ms
                .parse()
                .map_err(|_| bad(format!("a stored schedule reads '{text}'")))?;
            return When::every(Duration::from_millis(ms));
        }
        let rest = text
            .strip_prefix("cron:")
            .ok_or_else(|| bad(format!("a stored schedule reads '{text}'")))?;
        let (zone, expression) = rest
            .split_once(':')
            .ok_or_else(|| bad(format!("a stored schedule reads '{text}'")))?;
        When::cron(expression, zone)
    }

    /// The first firing after `after` (milliseconds since the Unix epoch), counting intervals
    /// from `origin`; `None` if there is none (a cron expression whose years have passed).
    pub fn next_after(&self, after: u64, origin: u64) -> Option<u64> {
        match self {
            When::Every(interval) => {
                let step = u64::try_from(interval.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1);
                if after < origin {
                    return Some(origin);
                }
                let n = (after - origin) / step + 1;
                origin.checked_add(n.checked_mul(step)?)
            }
            When::Cron { expression, zone } => {
                let schedule = parse_cron(expression).ok()?;
                let zone = parse_zone(zone).ok()?;
                super::firings::next_after(&schedule, zone, after)
            }
        }
    }

    /// In words, for people.
    pub fn describe(&self) -> String {
        match self {
            When::Cron { expression, zone } => format!("cron '{expression}' ({zone})"),
            When::Every(interval) => format!("every {}", words(*interval)),
        }
    }
}

/// What a firing does when the workflow the schedule started last still runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Overlap {
    /// It is skipped. The default.
    #[default]
    Skip,
    /// It waits for the running one to end, and starts then; one waits at most (a later
    /// firing replaces it).
    BufferOne,
    /// It starts anyway.
    AllowAll,
}

impl Overlap {
    /// Its name: `skip`, `buffer-one`, `allow-all`.
    pub fn name(self) -> &'static str {
        match self {
            Overlap::Skip => "skip",
            Overlap::BufferOne => "buffer-one",
            Overlap::AllowAll => "allow-all",
        }
    }
}

impl FromStr for Overlap {
    type Err = Error;
    fn from_str(s: &str) -> Result<Overlap> {
        match s {
            "skip" => Ok(Overlap::Skip),
            "buffer-one" => Ok(Overlap::BufferOne),
            "allow-all" => Ok(Overlap::AllowAll),
            other => Err(bad(format!(
                "overlap policy '{other}' is none of skip, buffer-one, allow-all"
            ))),
        }
    }
}

/// What happens to firings missed while no host ran the schedule (found more than
/// [`LATE`](super::LATE) after their time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CatchUp {
    /// They do not run. The default.
    #[default]
    Skip,
    /// The latest of them runs.
    Last,
    /// They run, oldest first: the latest `n` of them if there are more.
    All(u32),
}

impl CatchUp {
    /// Its name: `skip`, `last`, `all:N`.
    pub fn name(self) -> String {
        match self {
            CatchUp::Skip => "skip".into(),
            CatchUp::Last => "last".into(),
            CatchUp::All(n) => format!("all:{n}"),
        }
    }
}

impl FromStr for CatchUp {
    type Err = Error;
    fn from_str(s: &str) -> Result<CatchUp> {
        match s {
            "skip" => Ok(CatchUp::Skip),
            "last" => Ok(CatchUp::Last),
            other => match other.strip_prefix("all:").map(str::parse::<u32>) {
                Some(Ok(n)) if (1..=1_000).contains(&n) => Ok(CatchUp::All(n)),
                _ => Err(bad(format!(
                    "catch-up policy '{other}' is none of skip, last, all:N (N from 1 to 1000)"
                ))),
            },
        }
    }
}

fn parse_cron(expression: &str) -> Result<cron::Schedule> {
    cron::Schedule::from_str(expression.trim()).map_err(|e| {
        bad(format!(
            "'{expression}' is not a cron expression ({e}): give six or seven fields, seconds \
             first, as in '0 */5 * * * *' (every five minutes)"
        ))
    })
}

fn parse_zone(zone: &str) -> Result<chrono_tz::Tz> {
    zone.parse::<chrono_tz::Tz>().map_err(|_| {
        bad(format!(
            "'{zone}' is not a time zone: give an IANA name such as UTC or Europe/Paris"
        ))
    })
}

fn bad(message: String) -> Error {
    Error::new(ErrorKind::InvalidInput, message)
}

/// "10m", "1h", "90s", "1d": as `--every` takes it.
fn words(d: Duration) -> String {
    let s = d.as_secs();
    if d.subsec_nanos() != 0 {
        format!("{}ms", d.as_millis())
    } else if s.is_multiple_of(86_400) {
        format!("{}d", s / 86_400)
    } else if s.is_multiple_of(3_600) {
        format!("{}h", s / 3_600)
    } else if s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-26T14:00:00Z.
    const T: u64 = 1_795_701_600_000;

    #[test]
    fn intervals_count_from_their_origin() {
        let when = When::every(Duration::from_secs(10)).unwrap();
        assert_eq!(when.next_after(T, T), Some(T + 10_000));
        assert_eq!(when.next_after(T + 9_999, T), Some(T + 10_000));
        assert_eq!(when.next_after(T + 10_000, T), Some(T + 20_000));
        assert_eq!(when.next_after(T - 5, T), Some(T));
        assert!(When::every(Duration::from_millis(500)).is_err());
    }

    #[test]
    fn cron_follows_its_time_zone() {
        // Every day at 09:00 in Paris: 08:00Z in winter (UTC+1).
        let when = When::cron("0 0 9 * * *", "Europe/Paris").unwrap();
        assert_eq!(when.next_after(T, T), Some(T + 18 * 3_600_000));
        let utc = When::cron("0 0 9 * * *", "UTC").unwrap();
        assert_eq!(utc.next_after(T, T), Some(T + 19 * 3_600_000));
        let every_five = When::cron("0 */5 * * * *", "UTC").unwrap();
        assert_eq!(every_five.next_after(T, T), Some(T + 300_000));
        assert_eq!(When::decode(&when.encode()).unwrap(), when);
        let error = When::cron("every day", "UTC").unwrap_err();
        assert!(error.message().contains("seconds first"), "{error}");
        let error = When::cron("0 * * * * *", "Mars/Olympus").unwrap_err();
        assert!(error.message().contains("IANA"), "{error}");
    }

    #[test]
    fn the_next_firing_is_after_the_last_across_a_change_of_the_clocks() {
        // New York falls back on 2026-11-01: 01:00-02:00 local happens twice.
        let when = When::cron("0 */15 * * * *", "America/New_York").unwrap();
        let first = 1_793_511_000_000; // 01:30 EDT (05:30Z)
        let second = 1_793_514_600_000; // 01:30 EST (06:30Z)
        for at in [first, second] {
            let next = when.next_after(at, at).unwrap();
            assert!(next > at, "{next} after {at}");
            assert!(next - at <= 15 * 60_000, "{next} after {at}");
        }
    }

    #[test]
    fn policies_read_their_names() {
        for overlap in [Overlap::Skip, Overlap::BufferOne, Overlap::AllowAll] {
            assert_eq!(overlap.name().parse::<Overlap>().unwrap(), overlap);
        }
        for catch_up in [CatchUp::Skip, CatchUp::Last, CatchUp::All(3)] {
            assert_eq!(catch_up.name().parse::<CatchUp>().unwrap(), catch_up);
        }
        assert!("all:0".parse::<CatchUp>().is_err());
        assert!("most".parse::<Overlap>().is_err());
    }
}
