//! `sleep`, `sleep-until`, `forget`, `now`, `random`: the commands about time and chance.
//!
//! `now` and `random` are commands, not WASI calls, so that a durable host can record their answers
//! and replay them.

use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use wfcontract::{Command, CommandError, ErrorKind, Payload};

use crate::handlers::{Context, Request};
use crate::timer::Action;

/// `sleep` and `sleep-until`: a timer that completes the yield when it fires.
pub(crate) fn sleep(request: Request, cx: &Context<'_>) {
    let delay = match request.command {
        Command::Sleep(duration) => duration,
        Command::SleepUntil(nanos) => {
            let deadline = UNIX_EPOCH + Duration::from_nanos(nanos);
            deadline
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO)
        }
        _ => return,
    };
    let shared = &cx.scheduler().shared;
    cx.slot.has_timers.store(true, Ordering::Relaxed);
    let max = shared.config.max_sleeps;
    let action = Action::Complete(request.tag);
    if let Err(error) = shared.timer.schedule(delay, request.pid, action, max) {
        cx.complete(request.tag, Err(error));
    }
}

/// `forget`: drops a sleep (or a call) the process no longer waits for.
pub(crate) fn forget(request: Request, cx: &Context<'_>) {
    if let Command::Forget(tag) = request.command {
        let shared = &cx.scheduler().shared;
        shared.timer.forget(request.pid, tag);
        // A call it forgot: its handler drops what runs for it.
        shared.forgot(cx.slot, tag);
    }
}

/// `now`: the wall clock, as nanoseconds since the Unix epoch.
pub(crate) fn now(request: Request, cx: &Context<'_>) {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    cx.complete(request.tag, postcard(&nanos));
}

/// `random`: 64 bits from the operating system's generator.
pub(crate) fn random(request: Request, cx: &Context<'_>) {
    let result = getrandom::u64()
        .map_err(|e| CommandError::new(ErrorKind::Unavailable, format!("no randomness: {e}")))
        .and_then(|bits| postcard(&bits));
    cx.complete(request.tag, result);
}

fn postcard(value: &u64) -> Result<Payload, CommandError> {
    Payload::to_postcard(value).map_err(|e| CommandError::new(ErrorKind::Failed, e.to_string()))
}
