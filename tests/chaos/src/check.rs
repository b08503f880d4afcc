//! The checker: holds each workflow's end, as the store has it, to what the run's history says
//! was acknowledged. A violation is anything the engine promises and did not do:
//!
//! - a workflow whose start was acknowledged is missing (and no prune removed it), or one is
//!   there that nobody started;
//! - a `collect` workflow took a message never sent, took one twice or out of the order they
//!   were sent, or skipped one that was acknowledged before the last it took;
//! - a workflow failed, or was cancelled with no cancel sent, or did not end once it could;
//! - two different completions of one call were both accepted (`204`), or a workflow used an
//!   answer other than the one accepted;
//! - a workflow an acknowledged pause holds shows as running; an acknowledged upgrade did not
//!   give it its module.

use std::collections::BTreeMap;

use wfhost_client::wire::{ListParams, WorkflowJson};

use crate::history::{Ack, History, Kind, Workflow};

/// Every workflow in the store, by id, as `client`'s host lists them.
pub(crate) fn everything(
    client: &wfhost_client::Client,
) -> Result<BTreeMap<String, WorkflowJson>, String> {
    let mut all = BTreeMap::new();
    let mut after = None;
    loop {
        let params = ListParams {
            limit: Some(1000),
            after: after.take(),
            ..ListParams::default()
        };
        let page = client
            .list(&params)
            .map_err(|e| format!("listing the workflows: {e}"))?;
        for workflow in page.workflows {
            all.insert(workflow.id.clone(), workflow);
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(all),
        }
    }
}

/// Checks workflow `id`'s end (`found`: as the store has it, `None` if it has no such
/// workflow) against the history; an unfinished one is a violation only when `must_end`.
pub(crate) fn workflow(history: &mut History, id: &str, found: Option<&WorkflowJson>) {
    let Some(expected) = history.workflows.get(id).cloned() else {
        history.violation(format!(
            "workflow {id} is in the store, and nobody started it"
        ));
        return;
    };
    let Some(found) = found else {
        if expected.start == Ack::Yes && !expected.pruned {
            history.violation(format!(
                "workflow {id}, whose start was acknowledged, is not in the store"
            ));
        }
        return;
    };
    let mut violations = Vec::new();
    match found.status.as_str() {
        "completed" => {
            let result: serde_json::Value = found
                .result
                .as_ref()
                .and_then(|r| serde_json::from_str(r.get()).ok())
                .unwrap_or_default();
            match expected.kind {
                Kind::Collect(n) => {
                    let in_order = !history.shared;
                    collected(&expected, n, &result, in_order, found, &mut violations);
                }
                // A cancel that came while it waited is the call's outcome, which `call`
                // returns.
                Kind::Call if expected.cancel.is_some() && result["message"] == "cancelled" => {}
                Kind::Call => called(history, id, &result, &mut violations),
            }
        }
        "cancelled" if expected.cancel.is_none() => {
            violations.push("it was cancelled, and no cancel was sent".to_string());
        }
        "cancelled" => {}
        "failed" => violations.push(format!("it failed: {:?}", found.error)),
        // Unfinished: judged by the caller.
        _ => {}
    }
    if let Some(module) = upgraded_to(&expected, &found.module) {
        violations.push(module);
    }
    for what in violations {
        history.violation(format!("workflow {id}: {what}"));
    }
}

/// What is wrong with the messages `collect(n)` took, `result`, given what was sent. On one
/// host (`in_order`) messages are taken in the order they were acknowledged, so it took a prefix
/// of what reached it; through several hosts, in some order. Either way each message once, and
/// every acknowledged one either taken or still in the store, unread.
fn collected(
    expected: &Workflow,
    n: u32,
    result: &serde_json::Value,
    in_order: bool,
    found: &WorkflowJson,
    out: &mut Vec<String>,
) {
    let Some(taken) = result.as_array() else {
        out.push(format!("its result is not a list: {result}"));
        return;
    };
    let taken: Vec<u64> = taken.iter().filter_map(serde_json::Value::as_u64).collect();
    if taken.len() != n as usize {
        out.push(format!(
            "it took {} messages, not {n}: {taken:?}",
            taken.len()
        ));
    }
    let sent = &expected.sends;
    let mut seen = std::collections::BTreeSet::new();
    for value in &taken {
        if !sent.iter().any(|(v, _)| v == value) || !seen.insert(*value) {
            out.push(format!(
                "it took {value}, which was never sent, or took it twice (sent: {sent:?}; \
                 taken: {taken:?})"
            ));
            return;
        }
    }
    let acked_not_taken: Vec<u64> = sent
        .iter()
        .filter(|(v, ack)| *ack == Ack::Yes && !taken.contains(v))
        .map(|(v, _)| *v)
        .collect();
    if in_order {
        // A subsequence of what was sent, in order, with every acknowledged message before the
        // last it took.
        let mut at = 0;
        for value in &taken {
            match sent[at..].iter().position(|(v, _)| v == value) {
                Some(found) => at += found + 1,
                None => {
                    out.push(format!(
                        "it took {value} out of the order sent (sent: {sent:?}; taken: {taken:?})"
                    ));
                    return;
                }
            }
        }
        for (value, ack) in &sent[..at] {
            if *ack == Ack::Yes && !taken.contains(value) {
                out.push(format!(
                    "the acknowledged message {value} is lost (sent: {sent:?}; taken: {taken:?})"
                ));
            }
        }
    }
    // Either way, those acknowledged and not taken are in the store, unread.
    if acked_not_taken.len() as u64 > found.unread_messages {
        out.push(format!(
            "acknowledged messages {acked_not_taken:?} were not taken, and the store holds only \
             {} unread (sent: {sent:?}; taken: {taken:?})",
            found.unread_messages
        ));
    }
}

/// What is wrong with the answer the `call` workflow `id` used.
fn called(history: &History, id: &str, result: &serde_json::Value, out: &mut Vec<String>) {
    let Some(answer) = result.get("ok").and_then(serde_json::Value::as_str) else {
        out.push(format!("its call did not succeed: {result}"));
        return;
    };
    let completions: Vec<_> = history
        .completions
        .iter()
        .filter(|(key, _)| key.rsplit_once('#').is_some_and(|(of, _)| of == id))
        .flat_map(|(_, c)| c.iter())
        .collect();
    let mut accepted: Vec<&str> = completions
        .iter()
        .filter(|c| c.ack == Ack::Yes)
        .map(|c| c.answer.as_str())
        .collect();
    accepted.dedup();
    if accepted.len() > 1 {
        out.push(format!(
            "one call had {} different completions accepted: {accepted:?}",
            accepted.len()
        ));
    }
    match accepted.first() {
        Some(first) if *first != answer => out.push(format!(
            "it used {answer}, but the completion accepted (204) was {first}"
        )),
        Some(_) => {}
        None if completions.iter().any(|c| c.answer == answer) => {}
        None => out.push(format!("it used {answer}, which no worker gave")),
    }
}

/// What is wrong with the module workflow `expected` runs, `module`, given its upgrades.
fn upgraded_to(expected: &Workflow, module: &str) -> Option<String> {
    let last_acked = expected
        .upgrades
        .iter()
        .rposition(|(_, ack)| *ack == Ack::Yes);
    // The module of the last acknowledged upgrade, or of any that came after it unanswered.
    let allowed: Vec<&str> = match last_acked {
        Some(at) => expected.upgrades[at..]
            .iter()
            .map(|(m, _)| m.as_str())
            .collect(),
        // Its own module, or one an unanswered upgrade gave it.
        None => std::iter::once(expected.module.as_str())
            .chain(expected.upgrades.iter().map(|(m, _)| m.as_str()))
            .collect(),
    };
    (!allowed.contains(&module))
        .then(|| format!("it runs module {module}, and may run only one of {allowed:?}"))
}

/// Those an acknowledged pause holds must not show as running.
pub(crate) fn pauses(history: &mut History, found: &BTreeMap<String, WorkflowJson>) {
    let held: Vec<String> = history
        .workflows
        .iter()
        .filter(|(_, w)| !w.pruned && w.paused == Some((true, Ack::Yes)))
        .map(|(id, _)| id.clone())
        .collect();
    for id in held {
        if let Some(found) = found.get(&id) {
            if found.status == "running" {
                history.violation(format!(
                    "workflow {id}: a pause was acknowledged, and it shows as running"
                ));
            }
        }
    }
}
