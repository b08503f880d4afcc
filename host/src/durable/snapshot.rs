//! Snapshots: a durable workflow's whole state after a step, so that recovery replays only the
//! steps after the latest one and its time does not grow with the length of its history.
//!
//! The state is the process's hibernation image (the pages and globals that differ from a fresh
//! instance of its module) and what the engine knows of it: its position in the journal, what it
//! waits for, its last answer. A snapshot is written in the transaction of the step it follows,
//! so it never runs ahead of the journal; it replaces the workflow's previous one and goes when
//! the workflow ends. It applies only to the module bytes it came from (their hash is kept with
//! it); one that does not fit is ignored and the whole journal is replayed instead.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use wfcontract::{Status, Tag};

use super::pending::Pending;
use super::store::{NewSnapshot, Workflow};
use super::Durable;
use crate::wasm::SavedProcess;

/// The encoding this build writes; others are ignored (the journal is replayed).
const VERSION: u32 = 1;

/// A workflow's state after step `seq`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SavedWorkflow {
    version: u32,
    /// The step it follows.
    pub(crate) seq: u64,
    /// That step's status and what it asked to receive.
    pub(crate) status: Status,
    pub(crate) receive: u32,
    /// Its yields not yet answered.
    pub(crate) pending: Vec<(Tag, Pending)>,
    /// The last value its monotonic clock gave it, in nanoseconds.
    pub(crate) monotonic: Option<u64>,
    /// Its instance.
    pub(crate) process: SavedProcess,
}

impl SavedWorkflow {
    pub(crate) fn new(
        seq: u64,
        status: Status,
        receive: u32,
        pending: Vec<(Tag, Pending)>,
        monotonic: Option<u64>,
        process: SavedProcess,
    ) -> SavedWorkflow {
        SavedWorkflow {
            version: VERSION,
            seq,
            status,
            receive,
            pending,
            monotonic,
            process,
        }
    }

    /// The snapshot's bytes: its postcard encoding, then the SHA-256 of that. A page of the store
    /// damaged on disk would otherwise restore as memory the guest never wrote.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut bytes = postcard::to_allocvec(self).unwrap_or_default();
        let digest = Sha256::digest(&bytes);
        bytes.extend_from_slice(&digest);
        bytes
    }

    /// Decodes a snapshot of this build's encoding, checking its digest.
    pub(crate) fn decode(bytes: &[u8]) -> Result<SavedWorkflow, String> {
        let Some((body, digest)) = bytes.split_last_chunk::<32>() else {
            return Err(format!(
                "it is {} bytes long, too short to be one",
                bytes.len()
            ));
        };
        if Sha256::digest(body)[..] != digest[..] {
            return Err("its digest does not match its bytes: it is damaged".into());
        }
        let saved: SavedWorkflow = postcard::from_bytes(body).map_err(|e| e.to_string())?;
        if saved.version != VERSION {
            return Err(format!(
                "it is of version {}; this build reads {VERSION}",
                saved.version
            ));
        }
        Ok(saved)
    }
}

/// When a durable workflow's state is saved: [`Snapshots::every`], [`Snapshots::off`],
/// [`Snapshots::at_hibernation`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Snapshots {
    /// After this many events since its last snapshot (a step with none counts as one); 0: not
    /// by count (at hibernation only, if `at_hibernation`).
    pub every: u64,
    /// Also when a step leaves it hibernated (its image is made then anyway), after a tenth of
    /// `every` events since its last snapshot (at least one): a guest cannot make the host write
    /// its image at every event.
    pub at_hibernation: bool,
}

impl Default for Snapshots {
    /// Every 1,000 events, and at hibernation.
    fn default() -> Snapshots {
        Snapshots {
            every: 1_000,
            at_hibernation: true,
        }
    }
}

impl Snapshots {
    /// After every `events` events since the last snapshot, and when a step leaves the workflow
    /// hibernated (after a tenth of that); 0: never, as [`off`](Self::off) (and as the CLI's
    /// `--snapshot-every 0`).
    pub fn every(events: u64) -> Snapshots {
        match events {
            0 => Snapshots::off(),
            every => Snapshots {
                every,
                at_hibernation: true,
            },
        }
    }

    /// Never: recovery replays every journal from its start.
    pub fn off() -> Snapshots {
        Snapshots {
            every: 0,
            at_hibernation: false,
        }
    }

    /// Whether a workflow with `since` events since its last snapshot saves one now.
    pub(crate) fn due(&self, since: u64, hibernated: bool) -> bool {
        (self.every > 0 && since >= self.every)
            || (self.at_hibernation && hibernated && since >= self.at_next_hibernation())
    }

    /// The events since its last snapshot after which a workflow saves one when a step leaves
    /// it hibernated (with `at_hibernation`).
    pub(crate) fn at_next_hibernation(&self) -> u64 {
        (self.every / 10).max(1)
    }

    /// Only when a step leaves a workflow hibernated, after any event.
    pub fn at_hibernation() -> Snapshots {
        Snapshots {
            every: 0,
            at_hibernation: true,
        }
    }
}

/// What a durable host counts about snapshots and replay since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DurableCounters {
    /// Snapshots written.
    pub snapshots_written: u64,
    /// Recovered workflows restored from a snapshot. A recovered workflow is restored at its
    /// first event, not at the recovery: these count up as they wake.
    pub snapshots_restored: u64,
    /// Snapshots found at recovery and not used (another module, another encoding, damaged):
    /// those workflows replay their whole journal.
    pub snapshots_ignored: u64,
    /// Journaled steps replayed by recovered workflows (each when it was restored).
    pub steps_replayed: u64,
    /// Events in those steps.
    pub events_replayed: u64,
}

/// The live counts behind [`DurableCounters`].
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub(crate) snapshots_written: AtomicU64,
    pub(crate) snapshots_restored: AtomicU64,
    pub(crate) snapshots_ignored: AtomicU64,
    pub(crate) steps_replayed: AtomicU64,
    pub(crate) events_replayed: AtomicU64,
}

impl Counts {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn read(&self) -> DurableCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DurableCounters {
            snapshots_written: get(&self.snapshots_written),
            snapshots_restored: get(&self.snapshots_restored),
            snapshots_ignored: get(&self.snapshots_ignored),
            steps_replayed: get(&self.steps_replayed),
            events_replayed: get(&self.events_replayed),
        }
    }
}

/// The workflow whose snapshot is read: its number, id, module (hash) and journaled steps.
pub(crate) struct Whose<'a> {
    pub(crate) num: u64,
    pub(crate) id: &'a str,
    pub(crate) module: &'a str,
    pub(crate) steps: u64,
}

impl<'a> Whose<'a> {
    pub(crate) fn of(workflow: &'a Workflow) -> Whose<'a> {
        Whose {
            num: workflow.start.num,
            id: &workflow.start.id,
            module: &workflow.start.module,
            steps: workflow.steps,
        }
    }
}

impl Durable {
    /// The snapshot a dormant workflow's restore starts from: what recovery chose (see
    /// [`saved_from`](Self::saved_from)), read again; not counted or logged again.
    pub(crate) fn saved(
        &self,
        whose: Whose<'_>,
        compiled: &crate::wasm::Compiled,
        max_memory: usize,
    ) -> Option<SavedWorkflow> {
        let snapshot = self.reader.lock().snapshot(whose.num).ok()??;
        check(&whose, snapshot, compiled, max_memory).ok()
    }

    /// The snapshot recovery starts a workflow from: its latest (`snapshot`), when it came from
    /// the module the workflow runs and decodes. One that does not is counted, logged and set
    /// aside (the whole journal is replayed).
    pub(crate) fn saved_from(
        &self,
        whose: Whose<'_>,
        snapshot: NewSnapshot,
        compiled: &crate::wasm::Compiled,
        max_memory: usize,
    ) -> Option<SavedWorkflow> {
        check(&whose, snapshot, compiled, max_memory)
            .inspect_err(|why| {
                tracing::warn!(
                    workflow = %whose.id,
                    "its snapshot is not used ({why}); replaying its whole journal"
                );
                Counts::add(&self.counts.snapshots_ignored, 1);
            })
            .ok()
    }
}

/// `snapshot`, decoded, if it fits the workflow `whose` and its module; else why not.
fn check(
    whose: &Whose<'_>,
    snapshot: NewSnapshot,
    compiled: &crate::wasm::Compiled,
    max_memory: usize,
) -> Result<SavedWorkflow, String> {
    let saved = if snapshot.module != whose.module {
        Err(format!(
            "it came from module {}, and the workflow runs {}",
            snapshot.module, whose.module
        ))
    } else if snapshot.seq == 0 || snapshot.seq > whose.steps {
        Err(format!(
            "it follows step {} of a journal of {}",
            snapshot.seq, whose.steps
        ))
    } else {
        SavedWorkflow::decode(&snapshot.state).and_then(|saved| {
            if saved.seq != snapshot.seq {
                return Err(format!(
                    "it says step {} in a row for step {}",
                    saved.seq, snapshot.seq
                ));
            }
            // Checked in place now, so that starting from it cannot fail later.
            match saved.process.misfit(compiled, max_memory) {
                Some(why) => Err(why),
                None => Ok(saved),
            }
        })
    };
    saved
}
