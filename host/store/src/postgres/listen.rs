//! Waking hosts when there is work: `LISTEN wfhost_work` on a connection of its own, in a thread
//! of its own. Clients send `NOTIFY wfhost_work` with their starts, messages and cancels, and a
//! host with what it gives back, so a host polling every `--poll` hears of them at once. Polling
//! stays the fallback (a lost connection, a notification missed while reconnecting).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio_postgres::{AsyncMessage, NoTls};

use super::{describe, redact, FIRST_RETRY, LAST_RETRY};
use crate::{StoreError, StoreErrorKind, StoreResult, Wake};

/// How often a listener checks whether it must stop.
const TICK: Duration = Duration::from_millis(200);

/// Starts listening: `wake` is called for each notification, until `stop` is set.
pub(super) fn start(
    url: &str,
    config: tokio_postgres::Config,
    wake: Wake,
    stop: Arc<AtomicBool>,
) -> StoreResult<()> {
    let url = redact(url);
    std::thread::Builder::new()
        .name("wfhost-listen".into())
        .spawn(move || listen(&url, &config, &wake, &stop))
        .map(drop)
        .map_err(|e| {
            StoreError::new(
                StoreErrorKind::Unavailable,
                format_args!("could not start the listener's thread: {e}"),
            )
        })
}

fn listen(url: &str, config: &tokio_postgres::Config, wake: &Wake, stop: &AtomicBool) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::warn!("no listener for new work ({error}): hosts poll for it");
            return;
        }
    };
    let mut delay = FIRST_RETRY;
    while !stop.load(Ordering::Acquire) {
        let result: Result<(), tokio_postgres::Error> = runtime.block_on(async {
            let (client, mut connection) = config.connect(NoTls).await?;
            let (notified, mut notifications) = futures::channel::mpsc::unbounded::<()>();
            // Drives the connection and passes its notifications on.
            let driver = async move {
                let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
                while let Some(message) = messages.next().await {
                    if let AsyncMessage::Notification(_) = message? {
                        let _ = notified.unbounded_send(());
                    }
                }
                Ok(())
            };
            let work = async move {
                client.batch_execute("LISTEN wfhost_work").await?;
                // Work may have come while there was no listener.
                wake();
                while !stop.load(Ordering::Acquire) {
                    match tokio::time::timeout(TICK, notifications.next()).await {
                        Ok(Some(())) => wake(),
                        Ok(None) => return Ok(()),
                        Err(_) => {}
                    }
                }
                Ok(())
            };
            let outcome = match futures::future::select(Box::pin(driver), Box::pin(work)).await {
                futures::future::Either::Left((result, _))
                | futures::future::Either::Right((result, _)) => result,
            };
            outcome
        });
        if stop.load(Ordering::Acquire) {
            return;
        }
        if let Err(error) = result {
            tracing::debug!(store = %url, "listening for new work: {}", describe(&error));
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(LAST_RETRY);
    }
}
