//! A month of reminders: once a day, the workflow asks the host function `reminder_text` what to
//! say and sends it to the host, until `days` have passed or someone tells it "done".
//!
//! `wfhost run examples/reminders remind --input 30` would take thirty days. Its test,
//! `tests/time_skipping.rs`, runs it with `wfhost::testing` in milliseconds.

use std::time::Duration;

use wfguest::{Ctx, Error, Pid};

/// A day.
pub const DAY: Duration = Duration::from_secs(86_400);

/// Sends a reminder a day for `days` days, each at the day's end; a "done" message stops it
/// early (any other message is logged and ignored). Returns how many reminders it sent.
pub async fn remind(ctx: Ctx, days: u32) -> Result<u32, Error> {
    let start = ctx.now().await?;
    let mut sent = 0;
    while sent < days {
        // The next reminder is due a whole day after the start of its day, whatever arrived
        // in between.
        let due = start + DAY * (sent + 1);
        let left = due
            .duration_since(ctx.now().await?)
            .unwrap_or(Duration::ZERO);
        match ctx.recv_timeout::<String>(left).await? {
            Some(message) if message == "done" => break,
            Some(other) => ctx.info(format!("ignored a message: {other}")),
            None => {
                let text: String = ctx.call("reminder_text", &(sent + 1)).await?;
                ctx.send(Pid::HOST, &text).await?;
                sent += 1;
            }
        }
    }
    Ok(sent)
}

wfguest::entry_points!(remind);
