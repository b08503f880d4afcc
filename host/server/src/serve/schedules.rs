//! A [`Server`](super::Server)'s schedules: a thread that fires what is due, through the host it
//! serves with. Every host serving a store runs one; a firing starts its workflow once however
//! many look (its id is the schedule's and the firing's time).

use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use wfhost::Grants;
use wfhost::Host;
use wfhost::Result;
use wfhost::{Client, SCHEDULES_LOOK_EVERY};

/// The schedule thread; stopped and joined when dropped.
pub(super) struct Firing {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// Starts firing the store's schedules through `host`, their workflows with `grants`.
pub(super) fn start(host: &Host, grants: Grants) -> Result<Firing> {
    let client = Client::serving(host, grants)?;
    let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
    let thread = std::thread::Builder::new()
        .name("wfhost-schedules".into())
        .spawn(move || fire_until_stopped(&client, &stopped))
        .map_err(|e| {
            wfhost::Error::new(
                wfhost::ErrorKind::Config,
                format!("cannot start the schedules' thread: {e}"),
            )
        })?;
    Ok(Firing {
        stop: Some(stop),
        thread: Some(thread),
    })
}

fn fire_until_stopped(client: &Client, stopped: &Receiver<()>) {
    let mut failing = false;
    // When the previous look began: a firing due after it was not missed, however long looks
    // take.
    let mut since = None;
    loop {
        match client.fire_schedules(since) {
            Ok(fired) => {
                since = Some(fired.at);
                failing = false;
                if fired.started + fired.skipped > 0 {
                    tracing::debug!(
                        started = fired.started,
                        skipped = fired.skipped,
                        "fired schedules"
                    );
                }
            }
            Err(error) => {
                // Said once, not at every look, while it lasts.
                if !failing {
                    tracing::warn!("reading the schedules: {}", error.message());
                }
                failing = true;
            }
        }
        match stopped.recv_timeout(SCHEDULES_LOOK_EVERY) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}

impl Drop for Firing {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
