//! What a run did and what the hosts answered: every operation that was acknowledged (a success
//! answer), and every one whose fate is unknown (an error or no answer: it may or may not have
//! happened). The checker holds the store's end state to this record.

use std::collections::BTreeMap;

/// Whether an operation happened, as far as its answer says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ack {
    /// A success answer: it happened, and must be in the store.
    Yes,
    /// An error or no answer (a host killed, frozen or stopping): it may have happened.
    Maybe,
}

/// What a workflow runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `collect(n)`: takes `n` messages and returns them in the order it took them.
    Collect(u32),
    /// `call`: calls the worker function once and returns `{"ok": its answer}`.
    Call,
}

/// Everything done to one workflow.
#[derive(Clone, Debug)]
pub(crate) struct Workflow {
    pub(crate) kind: Kind,
    /// The module it started with.
    pub(crate) module: String,
    pub(crate) start: Ack,
    /// The messages sent to it, in the order they were sent (each value unique in the run).
    pub(crate) sends: Vec<(u64, Ack)>,
    /// A cancel was sent (acknowledged or not).
    pub(crate) cancel: Option<Ack>,
    /// The last pause or unpause sent, and whether it was acknowledged: `Some((true, Yes))`
    /// means it must stand paused (if it has not ended).
    pub(crate) paused: Option<(bool, Ack)>,
    /// The module hashes it was upgraded to, in order.
    pub(crate) upgrades: Vec<(String, Ack)>,
    /// Its end as read before a prune removed it (checked then).
    pub(crate) pruned: bool,
}

impl Workflow {
    pub(crate) fn new(kind: Kind, module: &str, start: Ack) -> Workflow {
        Workflow {
            kind,
            module: module.to_string(),
            start,
            sends: Vec::new(),
            cancel: None,
            paused: None,
            upgrades: Vec::new(),
            pruned: false,
        }
    }
}

/// A worker's completion of one delivery of a task, and the answer it got.
#[derive(Clone, Debug)]
pub(crate) struct Completion {
    /// What the worker answered the call with.
    pub(crate) answer: String,
    /// `Yes`: 204, the workflow has it. `Maybe`: no answer. Refusals (409, 404) are not kept.
    pub(crate) ack: Ack,
}

/// The record of one run.
#[derive(Debug, Default)]
pub(crate) struct History {
    pub(crate) workflows: BTreeMap<String, Workflow>,
    /// Completions of tasks, by the call's idempotency key.
    pub(crate) completions: BTreeMap<String, Vec<Completion>>,
    /// Operations done, by name, and how many were acknowledged.
    pub(crate) operations: BTreeMap<&'static str, (u64, u64)>,
    /// Faults injected, by name.
    pub(crate) faults: BTreeMap<&'static str, u64>,
    /// What went wrong, in words.
    pub(crate) violations: Vec<String>,
    /// Hosts share the store: messages sent through different hosts may be taken in another
    /// order than they were sent.
    pub(crate) shared: bool,
}

impl History {
    /// Counts one operation of kind `what`, acknowledged or not.
    pub(crate) fn count(&mut self, what: &'static str, ack: Ack) {
        let entry = self.operations.entry(what).or_default();
        entry.0 += 1;
        if ack == Ack::Yes {
            entry.1 += 1;
        }
    }

    /// Counts one fault of kind `what`.
    pub(crate) fn fault(&mut self, what: &'static str) {
        *self.faults.entry(what).or_default() += 1;
    }

    /// A violation of what the engine promises.
    pub(crate) fn violation(&mut self, what: String) {
        self.violations.push(what);
    }
}
