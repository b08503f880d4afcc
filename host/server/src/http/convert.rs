//! The library's answers as the API's JSON (`wfhost_client::wire`).

use wfhost_client::wire::{
    self, CancelJson, FailureJson, HostJson, ModuleJson, ModuleNameJson, PauseJson, StepJson,
    WorkflowJson,
};

use wfhost::{
    Cancelled, HistoryStep, HostStatus, Narrator, OutboxPage, PauseChange, StoredModule,
    WorkflowState, WorkflowStatus,
};

pub(crate) fn workflow(status: &WorkflowStatus) -> WorkflowJson {
    let (input, input_encoding) = match &status.input {
        Some(input) => wire::payload_json(input),
        None => (wire::null(), None),
    };
    let (result, result_encoding) = match &status.result {
        Some(result) => {
            let (raw, encoding) = wire::payload_json(result);
            (Some(raw), encoding)
        }
        None => (None, None),
    };
    WorkflowJson {
        id: status.id.clone(),
        status: status.state.name().to_string(),
        entry: status.entry.clone(),
        module: status.module.clone(),
        module_name: status.module_name.clone(),
        number: status.number,
        parent: status.parent,
        started: status.started,
        finished: status.finished,
        steps: status.steps,
        host: status.host.clone(),
        waiting_for_host: status.waiting_for_host,
        input,
        input_encoding,
        result,
        result_encoding,
        error: status.error.as_ref().map(|e| FailureJson {
            kind: e.kind.clone(),
            message: e.message.clone(),
        }),
        damaged: status.damaged.clone(),
        unread_messages: status.unread,
        cancel_asked: status.cancel_asked,
        paused: status.paused,
        run: status.run,
    }
}

pub(crate) fn module(module: &StoredModule) -> ModuleJson {
    ModuleJson {
        hash: module.hash.clone(),
        entry_points: module.entry_points.clone(),
        size: module.size,
        names: module
            .names
            .iter()
            .map(|n| ModuleNameJson {
                name: n.name.clone(),
                version: n.version,
            })
            .collect(),
    }
}

pub(crate) fn host(host: &HostStatus) -> HostJson {
    HostJson {
        id: host.id,
        name: host.name.clone(),
        alive: host.alive,
        lease_until: host.lease_until,
        workflows: host.workflows,
        this: host.this,
    }
}

pub(crate) fn cancel(cancelled: Cancelled, running: &str) -> CancelJson {
    let status = match cancelled {
        Cancelled::Ended(state) => state.name().to_string(),
        _ => running.to_string(),
    };
    CancelJson {
        cancel: cancelled.name().to_string(),
        status,
    }
}

pub(crate) fn pause(change: PauseChange, paused: bool) -> PauseJson {
    let unfinished = if paused {
        WorkflowState::Paused
    } else {
        WorkflowState::Running
    };
    let status = match change {
        PauseChange::Ended(state) => state.name(),
        _ => unfinished.name(),
    };
    PauseJson {
        pause: change.name().to_string(),
        paused: paused && matches!(change, PauseChange::Done | PauseChange::Already),
        status: status.to_string(),
    }
}

pub(crate) fn outbox(page: OutboxPage) -> wire::OutboxPage {
    wire::OutboxPage {
        messages: page
            .messages
            .into_iter()
            .map(|message| {
                let (data, data_encoding) = wire::payload_json(&message.data);
                wire::OutboxMessage {
                    tag: message.tag,
                    at: message.at,
                    data,
                    data_encoding,
                }
            })
            .collect(),
        next: page.next,
        finished: page.finished,
    }
}

/// A step, told by `narrator` (which has heard the steps before it).
pub(crate) fn step(narrator: &mut Narrator<'_>, step: &HistoryStep) -> StepJson {
    let told = narrator.step_json(step);
    let field = |name: &str| told.get(name).cloned().unwrap_or_default();
    let list = |name: &str| match field(name) {
        serde_json::Value::Array(items) => items,
        _ => Vec::new(),
    };
    StepJson {
        step: step.seq,
        at: step.at,
        after_ms: field("after_ms").as_u64(),
        events: list("events"),
        reads: step.reads.iter().map(ToString::to_string).collect(),
        yields: list("yields"),
        status: field("status"),
        record: step.record().iter().map(|b| format!("{b:02x}")).collect(),
    }
}

pub(crate) fn started(started: &wfhost::Started) -> wire::StartedJson {
    wire::StartedJson {
        new: started.new,
        workflow: workflow(&started.workflow),
    }
}

pub(crate) fn schedule(schedule: &wfhost::schedules::Schedule) -> wire::ScheduleJson {
    use wfhost::schedules::When;
    let (cron, time_zone, every_ms) = match &schedule.when {
        When::Cron { expression, zone } => (Some(expression.clone()), Some(zone.clone()), None),
        When::Every(interval) => (None, None, Some(interval.as_millis() as u64)),
    };
    // A schedule's input is JSON (the API and the CLI take JSON); another encoding shows as
    // the wire's object of bytes.
    let (input, _) = wire::payload_json(&schedule.input);
    wire::ScheduleJson {
        id: schedule.id.clone(),
        when: schedule.when.describe(),
        cron,
        time_zone,
        every_ms,
        module: schedule.module.clone(),
        entry: schedule.entry.clone(),
        input,
        overlap: schedule.overlap.name().to_string(),
        catch_up: schedule.catch_up.name(),
        jitter_ms: schedule.jitter.as_millis() as u64,
        paused: schedule.paused,
        next_fire: schedule.next_fire,
        last_workflow: schedule.last_workflow.clone(),
        buffered: schedule.buffered,
        fired: schedule.fired,
        created: schedule.created,
    }
}
