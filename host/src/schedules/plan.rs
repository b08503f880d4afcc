//! What a look at a due schedule decides: which firings start now, which are skipped, and where
//! the schedule stands after. A pure function of the schedule, the time and whether the
//! workflow it started last still runs, so that every host that looks decides the same (the
//! store then lets one start of each firing through, by its id).

use super::spec::{CatchUp, Overlap, When};
use super::LATE;

/// A schedule as the planner needs it.
#[derive(Clone, Debug)]
pub(crate) struct Timing<'a> {
    pub(crate) id: &'a str,
    pub(crate) when: &'a When,
    /// Where its intervals count from (its creation).
    pub(crate) origin: u64,
    /// Its next nominal firing, milliseconds since the Unix epoch.
    pub(crate) next_fire: u64,
    pub(crate) overlap: Overlap,
    pub(crate) catch_up: CatchUp,
    pub(crate) jitter_ms: u64,
    /// A firing waiting for the running workflow to end (`buffer-one`).
    pub(crate) buffered: Option<u64>,
}

/// What to do now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The nominal times of the firings to start now, oldest first.
    pub(crate) start: Vec<u64>,
    /// The schedule's next nominal firing after these.
    pub(crate) next_fire: u64,
    /// A firing left waiting (`buffer-one`).
    pub(crate) buffered: Option<u64>,
    /// Firings dropped: missed and not caught up, or overlapping.
    pub(crate) skipped: u64,
}

/// The most firings one look goes through (a schedule every second left for a day).
const MOST: usize = 100_000;

/// The delay of firing `at` of schedule `id`: the same on every host, spread over
/// `0..jitter_ms`.
pub(crate) fn jitter(id: &str, at: u64, jitter_ms: u64) -> u64 {
    if jitter_ms == 0 {
        return 0;
    }
    // FNV-1a over the id and the time.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in id.bytes().chain(at.to_le_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash % jitter_ms
}

/// What schedule `timing` does at `now`, when the workflow it started last still runs
/// (`running`) or not; `None` when nothing is due. `since`: when this host's previous look
/// began, if it looked before: a firing due after that was not missed, however long the looks
/// take; one due more than [`LATE`] before it (or before now, at a host's first look) was.
pub(crate) fn plan(
    timing: &Timing<'_>,
    now: u64,
    since: Option<u64>,
    running: bool,
) -> Option<Plan> {
    let looked = since.map_or(now, |since| since.min(now));
    let due_at = |t: u64| t.saturating_add(jitter(timing.id, t, timing.jitter_ms));
    let mut overdue = Vec::new();
    let mut t = timing.next_fire;
    let mut next_fire = t;
    while due_at(t) <= now {
        if overdue.len() == MOST {
            // Past that many, the rest are dropped as missed.
            next_fire = timing
                .when
                .next_after(now, timing.origin)
                .unwrap_or(u64::MAX);
            break;
        }
        overdue.push(t);
        match timing.when.next_after(t, timing.origin) {
            Some(next) => {
                t = next;
                next_fire = next;
            }
            None => {
                next_fire = u64::MAX;
                break;
            }
        }
    }
    let late = u64::try_from(LATE.as_millis()).unwrap_or(u64::MAX);
    let (missed, on_time): (Vec<u64>, Vec<u64>) = overdue
        .iter()
        .partition(|&&t| looked.saturating_sub(due_at(t)) > late);
    let caught: &[u64] = match timing.catch_up {
        CatchUp::Skip => &[],
        CatchUp::Last => &missed[missed.len().saturating_sub(1)..],
        CatchUp::All(n) => &missed[missed.len().saturating_sub(n as usize)..],
    };
    let mut skipped = (missed.len() - caught.len()) as u64;
    let mut start = Vec::new();
    let mut buffered = timing.buffered;
    let mut running = running;
    if let Some(waiting) = buffered {
        if !running {
            start.push(waiting);
            buffered = None;
            running = true;
        }
    }
    for &t in caught.iter().chain(&on_time) {
        match timing.overlap {
            Overlap::AllowAll => start.push(t),
            _ if !running => {
                start.push(t);
                running = true;
            }
            Overlap::Skip => skipped += 1,
            Overlap::BufferOne => {
                if buffered.replace(t).is_some() {
                    skipped += 1;
                }
            }
        }
    }
    if overdue.is_empty() && start.is_empty() {
        return None;
    }
    Some(Plan {
        start,
        next_fire,
        buffered,
        skipped,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const T: u64 = 1_795_701_600_000;
    const S: u64 = 1_000;

    fn every_second() -> When {
        When::every(Duration::from_secs(1)).unwrap()
    }

    fn timing(when: &When, overlap: Overlap, catch_up: CatchUp) -> Timing<'_> {
        Timing {
            id: "s",
            when,
            origin: T,
            next_fire: T + S,
            overlap,
            catch_up,
            jitter_ms: 0,
            buffered: None,
        }
    }

    #[test]
    fn an_on_time_firing_starts_and_the_next_is_a_second_on() {
        let when = every_second();
        let t = timing(&when, Overlap::Skip, CatchUp::Skip);
        assert_eq!(plan(&t, T + S - 1, None, false), None);
        let p = plan(&t, T + S + 200, None, false).unwrap();
        assert_eq!(
            (p.start, p.next_fire, p.skipped),
            (vec![T + S], T + 2 * S, 0)
        );
    }

    #[test]
    fn missed_firings_follow_the_catch_up_policy() {
        // Down from T+1 s to T+6.3 s: T+1..T+5 were missed, T+6 is on time.
        let when = every_second();
        let now = T + 6 * S + 300;
        let started = |catch_up| {
            let p = plan(
                &timing(&when, Overlap::AllowAll, catch_up),
                now,
                None,
                false,
            )
            .unwrap();
            assert_eq!(p.next_fire, T + 7 * S);
            (p.start, p.skipped)
        };
        assert_eq!(started(CatchUp::Skip), (vec![T + 6 * S], 5));
        assert_eq!(started(CatchUp::Last), (vec![T + 5 * S, T + 6 * S], 4));
        assert_eq!(
            started(CatchUp::All(3)),
            (vec![T + 3 * S, T + 4 * S, T + 5 * S, T + 6 * S], 2)
        );
        assert_eq!(started(CatchUp::All(100)).0.len(), 6);
    }

    #[test]
    fn a_long_look_misses_nothing_that_came_due_during_it() {
        // The previous look began at T+1.5 s and took until T+3.2 s: T+2 and T+3 came due
        // meanwhile, and are on time.
        let when = every_second();
        let mut t = timing(&when, Overlap::AllowAll, CatchUp::Skip);
        t.next_fire = T + 2 * S;
        let p = plan(&t, T + 3 * S + 200, Some(T + 1_500), false).unwrap();
        assert_eq!((p.start, p.skipped), (vec![T + 2 * S, T + 3 * S], 0));
    }

    #[test]
    fn overlapping_firings_follow_the_overlap_policy() {
        let when = every_second();
        let now = T + S + 10;
        let p = plan(
            &timing(&when, Overlap::Skip, CatchUp::Skip),
            now,
            None,
            true,
        )
        .unwrap();
        assert_eq!((p.start.len(), p.skipped, p.buffered), (0, 1, None));
        let p = plan(
            &timing(&when, Overlap::AllowAll, CatchUp::Skip),
            now,
            None,
            true,
        )
        .unwrap();
        assert_eq!(p.start, [T + S]);
        // Buffer one: it waits, a later one replaces it, and it starts once the last ended.
        let mut t = timing(&when, Overlap::BufferOne, CatchUp::Skip);
        let p = plan(&t, now, None, true).unwrap();
        assert_eq!((p.start.len(), p.buffered), (0, Some(T + S)));
        t.buffered = p.buffered;
        t.next_fire = p.next_fire;
        let p = plan(&t, now + S, None, true).unwrap();
        assert_eq!((p.buffered, p.skipped), (Some(T + 2 * S), 1));
        t.buffered = p.buffered;
        t.next_fire = p.next_fire;
        let p = plan(&t, now + S + 100, None, false).unwrap();
        assert_eq!((p.start, p.buffered), (vec![T + 2 * S], None));
    }

    #[test]
    fn jitter_delays_a_firing_the_same_way_on_every_host() {
        let when = every_second();
        let mut t = timing(&when, Overlap::AllowAll, CatchUp::Skip);
        t.jitter_ms = 500;
        let delay = jitter("s", T + S, 500);
        assert!(delay < 500);
        assert_eq!(delay, jitter("s", T + S, 500));
        assert_eq!(
            plan(&t, T + S + delay.saturating_sub(1), None, false).is_none(),
            delay > 0
        );
        assert_eq!(plan(&t, T + S + delay, None, false).unwrap().start, [T + S]);
    }
}
