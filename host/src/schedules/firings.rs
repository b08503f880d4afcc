//! When a cron expression fires in a time zone, across the changes of its clocks.
//!
//! The expression is read on the zone's wall clock. Where the clocks change, the rule is cron's
//! (Vixie cron, and what `systemd` timers and Temporal's schedules do in effect):
//!
//! - **Spring forward** (a wall-clock hour that does not happen): a time in the gap fires at the
//!   first instant after it, once. `0 30 2 * * *` in Europe/Paris fires at 03:00 CEST on
//!   2026-03-29; `0 */15 * * * *` fires once at 03:00 for 02:00 to 02:45, and goes on.
//! - **Fall back** (a wall-clock hour that happens twice): a time in it fires at its first
//!   occurrence; and at its second too when the expression fires every hour (its hour field is
//!   `*`), so that a schedule of every few minutes keeps its pace through both. `0 */15 * * * *`
//!   in America/New_York fires at 01:00, 01:15, 01:30 and 01:45 EDT and again EST on
//!   2026-11-01; `0 30 1 * * *` fires once, at 01:30 EDT.
//!
//! Each firing is an instant, and no two firings share one.

use chrono::offset::LocalResult;
use chrono::{DateTime, Duration as Span, NaiveDateTime, TimeZone, Timelike as _, Utc};
use chrono_tz::Tz;
use cron::{Schedule, TimeUnitSpec as _};

/// More than any change of a zone's clocks (two hours, in history), around an instant.
const SHIFT: i64 = 3 * 3_600;

/// The first firing of `schedule` in `zone` strictly after `after` (milliseconds since the Unix
/// epoch); `None` if there is none.
pub(super) fn next_after(schedule: &Schedule, zone: Tz, after: u64) -> Option<u64> {
    let at = Utc
        .timestamp_millis_opt(i64::try_from(after).ok()?)
        .single()?;
    let offset = |t: DateTime<Utc>| t.with_timezone(&zone).naive_local() - t.naive_utc();
    let (before, later) = (at - Span::seconds(SHIFT), at + Span::seconds(SHIFT));
    if offset(before) == offset(at) && offset(at) == offset(later) {
        // No change of the clocks near: the wall clock maps one to one onto instants. (The
        // next firing may lie past a change further on, which the careful way below handles
        // when it is reached: this answer is before it.)
        let wall = at.with_timezone(&zone).naive_local();
        let next = schedule.after(&wall.and_utc()).next()?.naive_utc();
        if next - wall <= Span::seconds(SHIFT) {
            return millis(once(zone, next)?);
        }
        return careful(schedule, zone, at, next - Span::seconds(SHIFT));
    }
    careful(
        schedule,
        zone,
        at,
        at.naive_utc() - Span::seconds(SHIFT) + offset(at),
    )
}

/// The first firing after `at`, looking at the wall-clock times from `from` on: each maps to
/// the instants it fires at (by the rule above), and the earliest after `at` wins. Wall-clock
/// times more than [`SHIFT`] past the first that maps after `at` cannot map before it.
fn careful(schedule: &Schedule, zone: Tz, at: DateTime<Utc>, from: NaiveDateTime) -> Option<u64> {
    let every_hour = schedule.hours().is_all();
    let mut best: Option<DateTime<Utc>> = None;
    let mut horizon: Option<NaiveDateTime> = None;
    for wall in schedule.after(&from.and_utc()).take(100_000) {
        let wall = wall.naive_utc();
        if horizon.is_some_and(|horizon| wall > horizon) {
            break;
        }
        for instant in instants(zone, wall, every_hour) {
            if instant > at && best.is_none_or(|best| instant < best) {
                best = Some(instant);
                horizon.get_or_insert(wall + Span::seconds(SHIFT));
            }
        }
    }
    millis(best?)
}

/// The instants wall-clock time `wall` fires at in `zone`: one; none for a time in a gap, which
/// fires at the gap's end instead; the first of a time that happens twice, and the second too
/// when the schedule fires every hour.
fn instants(zone: Tz, wall: NaiveDateTime, every_hour: bool) -> Vec<DateTime<Utc>> {
    match zone.from_local_datetime(&wall) {
        LocalResult::Single(t) => vec![t.with_timezone(&Utc)],
        LocalResult::Ambiguous(first, second) if every_hour => {
            vec![first.with_timezone(&Utc), second.with_timezone(&Utc)]
        }
        LocalResult::Ambiguous(first, _) => vec![first.with_timezone(&Utc)],
        LocalResult::None => gap_end(zone, wall).into_iter().collect(),
    }
}

/// The one instant `wall` fires at, away from any change of the clocks.
fn once(zone: Tz, wall: NaiveDateTime) -> Option<DateTime<Utc>> {
    instants(zone, wall, false).into_iter().next()
}

/// The first instant after the gap that `wall` falls in: the first wall-clock minute that
/// exists after it (zones change their clocks on whole minutes).
fn gap_end(zone: Tz, wall: NaiveDateTime) -> Option<DateTime<Utc>> {
    let minute = wall.with_second(0)?.with_nanosecond(0)?;
    (1..=24 * 60).find_map(|n| {
        zone.from_local_datetime(&(minute + Span::minutes(n)))
            .earliest()
            .map(|t| t.with_timezone(&Utc))
    })
}

fn millis(t: DateTime<Utc>) -> Option<u64> {
    u64::try_from(t.timestamp_millis()).ok()
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;

    fn at(text: &str) -> u64 {
        let t = DateTime::parse_from_rfc3339(text).unwrap();
        u64::try_from(t.timestamp_millis()).unwrap()
    }

    fn utc(ms: u64) -> String {
        let t = Utc.timestamp_millis_opt(ms as i64).unwrap();
        t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    /// The firings of `expression` in `zone` from `from` (exclusive) to `to` (inclusive).
    fn firings(expression: &str, zone: &str, from: &str, to: &str) -> Vec<String> {
        let schedule = Schedule::from_str(expression).unwrap();
        let zone: Tz = zone.parse().unwrap();
        let (mut t, end) = (at(from), at(to));
        let mut all = Vec::new();
        while let Some(next) = next_after(&schedule, zone, t) {
            if next > end {
                break;
            }
            assert!(next > t);
            all.push(utc(next));
            t = next;
        }
        all
    }

    #[test]
    fn every_quarter_hour_keeps_its_pace_through_both_changes() {
        // New York falls back at 06:00Z on 2026-11-01 (02:00 EDT becomes 01:00 EST): 01:00 to
        // 01:45 happen twice, and fire twice.
        let fall = firings(
            "0 */15 * * * *",
            "America/New_York",
            "2026-11-01T05:30:00Z",
            "2026-11-01T07:15:00Z",
        );
        assert_eq!(
            fall,
            [
                "2026-11-01T05:45:00Z",
                "2026-11-01T06:00:00Z",
                "2026-11-01T06:15:00Z",
                "2026-11-01T06:30:00Z",
                "2026-11-01T06:45:00Z",
                "2026-11-01T07:00:00Z",
                "2026-11-01T07:15:00Z",
            ]
        );
        // Paris falls back at 01:00Z on 2026-10-25 (03:00 CEST becomes 02:00 CET).
        let fall = firings(
            "0 */15 * * * *",
            "Europe/Paris",
            "2026-10-25T00:30:00Z",
            "2026-10-25T02:00:00Z",
        );
        assert_eq!(fall.len(), 6, "{fall:?}");
        assert_eq!(fall[0], "2026-10-25T00:45:00Z");
        assert_eq!(fall[5], "2026-10-25T02:00:00Z");
        // Paris springs forward at 01:00Z on 2026-03-29 (02:00 CET becomes 03:00 CEST): 02:00
        // to 02:45 do not happen, and fire once, at 03:00, with 03:00 itself.
        let spring = firings(
            "0 */15 * * * *",
            "Europe/Paris",
            "2026-03-29T00:30:00Z",
            "2026-03-29T01:30:00Z",
        );
        assert_eq!(
            spring,
            [
                "2026-03-29T00:45:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-29T01:15:00Z",
                "2026-03-29T01:30:00Z",
            ]
        );
        // New York springs forward at 07:00Z on 2026-03-08 (02:00 EST becomes 03:00 EDT).
        let spring = firings(
            "0 */15 * * * *",
            "America/New_York",
            "2026-03-08T06:30:00Z",
            "2026-03-08T07:30:00Z",
        );
        assert_eq!(
            spring,
            [
                "2026-03-08T06:45:00Z",
                "2026-03-08T07:00:00Z",
                "2026-03-08T07:15:00Z",
                "2026-03-08T07:30:00Z",
            ]
        );
    }

    #[test]
    fn a_daily_time_fires_once_a_day_through_both_changes() {
        // 02:30 does not happen in Paris on 2026-03-29: it fires at 03:00 CEST instead.
        let spring = firings(
            "0 30 2 * * *",
            "Europe/Paris",
            "2026-03-27T12:00:00Z",
            "2026-03-31T12:00:00Z",
        );
        assert_eq!(
            spring,
            [
                "2026-03-28T01:30:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-30T00:30:00Z",
                "2026-03-31T00:30:00Z",
            ]
        );
        // 01:30 happens twice in New York on 2026-11-01: it fires at the first.
        let fall = firings(
            "0 30 1 * * *",
            "America/New_York",
            "2026-10-30T12:00:00Z",
            "2026-11-03T12:00:00Z",
        );
        assert_eq!(
            fall,
            [
                "2026-10-31T05:30:00Z",
                "2026-11-01T05:30:00Z",
                "2026-11-02T06:30:00Z",
                "2026-11-03T06:30:00Z",
            ]
        );
        // 02:30 in Paris on the day it falls back: once, at the first.
        let fall = firings(
            "0 30 2 * * *",
            "Europe/Paris",
            "2026-10-24T12:00:00Z",
            "2026-10-26T12:00:00Z",
        );
        assert_eq!(fall, ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]);
        // 02:30 in New York on the day it springs forward: at 03:00 EDT.
        let spring = firings(
            "0 30 2 * * *",
            "America/New_York",
            "2026-03-07T12:00:00Z",
            "2026-03-09T12:00:00Z",
        );
        assert_eq!(spring, ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]);
    }

    #[test]
    fn firings_far_apart_are_found_across_a_change() {
        // The first Monday of November at 09:00 New York, asked for in October.
        let next = firings(
            "0 0 9 1-7 11 Mon",
            "America/New_York",
            "2026-10-01T00:00:00Z",
            "2026-12-31T00:00:00Z",
        );
        assert_eq!(next, ["2026-11-02T14:00:00Z"]);
    }
}
