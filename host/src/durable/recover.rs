//! Recovery: every unfinished workflow of the store starts again under its pid, from its latest
//! snapshot and the journal after it, and goes on; the messages waiting for them are delivered
//! again.

use std::collections::HashSet;
use std::sync::Arc;

use wfcontract::{Payload, Pid};

use super::process::DurableProcess;
use super::record::StepRecord;
use super::snapshot::{Counts, SavedWorkflow};
use super::store::{Cancel, Ending, Op, Workflow};
use super::{store_error, Durable};
use crate::error::Result;
use crate::grants::Grants;
use crate::run::Run;
use crate::wasm::WasmProcess;
use crate::Host;

/// The name a module kept in the store is loaded under to recover its workflows (their children
/// without a module name run it too).
fn stored_name(hash: &str) -> String {
    format!("wfhost:{hash}")
}

/// Opens the gate when a recovery ends, however it ends.
struct Gate<'a>(&'a Durable);

impl Drop for Gate<'_> {
    fn drop(&mut self) {
        self.0.open_gate();
    }
}

impl Durable {
    /// The snapshot recovery starts `workflow` from: its latest, when it came from the module
    /// the workflow runs and decodes. One that does not is counted and set aside (the whole
    /// journal is replayed).
    fn saved(&self, workflow: &Workflow) -> Option<SavedWorkflow> {
        let start = &workflow.start;
        let snapshot = match self.reader.lock().snapshot(start.num) {
            Ok(snapshot) => snapshot?,
            Err(error) => {
                tracing::warn!(workflow = %start.id, "its snapshot could not be read: {error}");
                Counts::add(&self.counts.snapshots_ignored, 1);
                return None;
            }
        };
        let saved = if snapshot.module != start.module {
            Err(format!(
                "it came from module {}, and the workflow runs {}",
                snapshot.module, start.module
            ))
        } else if snapshot.seq == 0 || snapshot.seq > workflow.steps {
            Err(format!(
                "it follows step {} of a journal of {}",
                snapshot.seq, workflow.steps
            ))
        } else {
            SavedWorkflow::decode(&snapshot.state).and_then(|saved| {
                if saved.seq == snapshot.seq {
                    Ok(saved)
                } else {
                    Err(format!(
                        "it says step {} in a row for step {}",
                        saved.seq, snapshot.seq
                    ))
                }
            })
        };
        saved
            .inspect_err(|why| {
                tracing::warn!(
                    workflow = %start.id,
                    "its snapshot is not used ({why}); replaying its whole journal"
                );
                Counts::add(&self.counts.snapshots_ignored, 1);
            })
            .ok()
    }
}

impl Host {
    /// Starts every unfinished workflow of the store again: each starts from its latest snapshot
    /// (see [`HostBuilder::snapshots`](crate::HostBuilder::snapshots)), or a fresh instance of
    /// the module it started with (kept in the store by hash), replays the journal after that,
    /// checking that it does what the journal says, and goes on from there: its timers fire at their due time (at once
    /// if that passed while the host was down), host calls that had not answered run again with
    /// the same idempotency key, and messages that had not been taken are delivered again.
    ///
    /// A workflow runs the module loaded now with the same bytes, under that module's grants;
    /// with none loaded, the bytes kept in the store, with default grants (see
    /// [`recover_with`](Self::recover_with)).
    ///
    /// Returns a [`Run`] for each top-level workflow recovered (children are followed by their
    /// parents), with its id. Call it once, after loading modules and before starting new work.
    pub fn recover(&self) -> Result<Vec<(String, Run)>> {
        self.recover_with(Grants::default())
    }

    /// As [`recover`](Self::recover), with `grants` for the workflows whose module is not loaded
    /// (they run the bytes the store kept).
    pub fn recover_with(&self, grants: Grants) -> Result<Vec<(String, Run)>> {
        let durable = self.durable()?.clone();
        let inner = &self.inner;
        inner.running()?;
        // No recovered workflow steps before every one of them is there and has its messages.
        durable.close_gate();
        let _gate = Gate(&durable);
        let (unfinished, messages) = {
            let mut reader = durable.reader.lock();
            (
                reader.workflows(true).map_err(store_error)?,
                reader.messages().map_err(store_error)?,
            )
        };
        durable.set_refused(
            messages
                .iter()
                .filter_map(|m| m.refused.clone().map(|why| (m.message.id, why)))
                .collect(),
        );
        if let Some(last) = unfinished.last() {
            inner.handle.reserve_pids_through(Pid(last.start.num));
        }
        let mut runs = Vec::new();
        let mut recovered: HashSet<u64> = HashSet::new();
        let mut cancels = Vec::new();
        for workflow in unfinished {
            let start = &workflow.start;
            let pid = Pid(start.num);
            if durable.ids.contains(pid) {
                continue;
            }
            let id: Arc<str> = Arc::from(start.id.as_str());
            let fail = |message: String| {
                tracing::error!(workflow = %id, "could not be recovered: {message}");
                durable.write(vec![Op::End {
                    num: start.num,
                    ending: Ending::Failed {
                        kind: "failed".into(),
                        message: format!("could not be recovered: {message}"),
                    },
                    at: super::process::unix_millis(),
                }])
            };
            let name = stored_name(&start.module);
            let loaded = match inner
                .modules
                .by_hash(&start.module)
                .ok_or(())
                .or_else(|()| inner.modules.get(&name))
            {
                Ok(loaded) => loaded,
                Err(_) => {
                    let bytes: Option<Vec<u8>> = durable
                        .reader
                        .lock()
                        .module(&start.module)
                        .map_err(store_error)?;
                    let Some(bytes) = bytes else {
                        fail(format!("the store lacks its module {}", start.module))?;
                        continue;
                    };
                    let compiled = inner.wasm.compile(&bytes)?;
                    inner.modules.insert(&name, compiled, grants.clone());
                    inner.modules.get(&name)?
                }
            };
            let saved = durable.saved(&workflow);
            let after = saved.as_ref().map_or(0, |saved| saved.seq);
            let steps = durable
                .reader
                .lock()
                .steps(start.num, after)
                .map_err(store_error)?;
            let records: std::result::Result<Vec<StepRecord>, _> = steps
                .iter()
                .map(|s| StepRecord::decode(&s.record))
                .collect();
            let records = match records {
                Ok(records) => records,
                Err(e) => {
                    fail(format!("its journal does not decode: {e}"))?;
                    continue;
                }
            };
            let input: Payload = match postcard::from_bytes(&start.input) {
                Ok(input) => input,
                Err(e) => {
                    fail(format!("its input does not decode: {e}"))?;
                    continue;
                }
            };
            let process = WasmProcess::new(
                Arc::clone(&inner.wasm),
                loaded.spec(None, Arc::clone(&inner.wasm.limits)),
            );
            let process = DurableProcess::new(
                process,
                Arc::clone(&durable),
                Arc::clone(&id),
                Arc::from(start.module.as_str()),
            )
            .recovered(saved, records);
            durable.ids.insert(pid, Arc::clone(&id));
            // Linked to its parent if the parent runs again too; a parent that ended had
            // cancelled it.
            let parent = start.parent.map(Pid).filter(|p| recovered.contains(&p.0));
            let orphaned = start.parent.is_some() && parent.is_none();
            let run = self.spawn_durable(process, pid, parent, &start.entry, input);
            let run = match run {
                Ok(run) => run,
                Err(error) => {
                    durable.ids.remove(pid);
                    return Err(error);
                }
            };
            recovered.insert(start.num);
            if workflow.cancel == Cancel::Asked || (orphaned && workflow.cancel == Cancel::No) {
                // Once the gate is open: a cancel's grace period runs from there.
                cancels.push(pid);
            }
            if start.parent.is_none() {
                runs.push((start.id.clone(), run));
            }
        }
        for message in messages {
            if message.refused.is_some() || !recovered.contains(&message.message.receiver) {
                continue;
            }
            let m = &message.message;
            let payload: Payload = match postcard::from_bytes(&m.payload) {
                Ok(payload) => payload,
                Err(e) => {
                    // Refused, as a full mailbox is: the sender (if it waits) hears so.
                    let why = format!("message {} in the store does not decode: {e}", m.id);
                    tracing::error!("{why}");
                    durable.refuse(m.id, &why);
                    continue;
                }
            };
            if let Err(refused) =
                inner
                    .handle
                    .send_numbered(Pid(m.sender), Pid(m.receiver), m.id, payload)
            {
                durable.refuse(m.id, &refused.to_string());
            }
        }
        durable.open_gate();
        for pid in cancels {
            let _ = inner.handle.cancel(pid);
        }
        Ok(runs)
    }
}
