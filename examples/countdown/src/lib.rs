//! Timers and logs: a countdown, and two sleeps joined.
//!
//! `wfhost run examples/countdown countdown --input '{"from": 3, "interval_ms": 100}'`

use std::time::Duration;

use serde::{Deserialize, Serialize};
use wfguest::{Ctx, Error};

/// How to count down.
#[derive(Debug, Deserialize)]
pub struct Countdown {
    /// The first number said.
    pub from: u32,
    /// Milliseconds between numbers.
    pub interval_ms: u64,
}

/// Says `from`, `from - 1`, ... `1` at the given interval, then "liftoff".
pub async fn countdown(ctx: Ctx, plan: Countdown) -> Result<String, Error> {
    for n in (1..=plan.from).rev() {
        ctx.log_with(wfguest::Level::Info, "tick", &[("n", &n)]);
        ctx.sleep(Duration::from_millis(plan.interval_ms)).await?;
    }
    ctx.info("liftoff");
    Ok("liftoff".into())
}

/// What `both` reports.
#[derive(Debug, Serialize)]
pub struct Joined {
    /// The two sleeps' lengths, in milliseconds.
    pub slept_ms: [u64; 2],
}

/// Sleeps `a` and `b` milliseconds concurrently: both timers are in flight at once, so this takes
/// about `max(a, b)`, not `a + b`.
pub async fn both(ctx: Ctx, [a, b]: [u64; 2]) -> Result<Joined, Error> {
    let first = ctx.sleep(Duration::from_millis(a));
    let second = ctx.sleep(Duration::from_millis(b));
    first.await?;
    second.await?;
    ctx.info("both timers fired");
    Ok(Joined { slept_ms: [a, b] })
}

wfguest::entry_points!(countdown, both);
