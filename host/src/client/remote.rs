//! A client of a `wfhost serve --http` server: each operation is one call of its API
//! (`wfhost_client`), and its JSON is read back into the same types a store gives.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wfcontract::{Encoding, Payload};
use wfhost_client::wire::{
    self, CountParams, HistoryParams, ListParams, OutboxParams, StartRequest, WorkflowJson,
};

use super::backend::{Backend, Schedules};
use super::types::{
    Cancelled, Failure, HistoryStep, HostStatus, ListQuery, OutboxMessage, OutboxPage, Page,
    PauseChange, Started, StoredModule, WorkflowCounts, WorkflowState, WorkflowStatus,
};
use super::{ModuleRef, Start};
use crate::durable::record::StepRecord;
use crate::durable::store::Location;
use crate::error::{Error, ErrorKind, Result};

/// The longest one call waits: shorter than what proxies between client and server tend to
/// allow an answer to take.
const ASK_AT_MOST: Duration = Duration::from_secs(55);

/// How long to wait before asking again a server that answered `503` after the API's client
/// had asked again for its `retry_for` (it is recovering a large store).
const RETRY_AFTER: Duration = Duration::from_millis(500);

pub(crate) struct RemoteBackend {
    pub(crate) location: Location,
    /// `None` when the URL cannot be a server's (said at the first call).
    api: std::result::Result<wfhost_client::Client, String>,
}

impl RemoteBackend {
    pub(crate) fn new(location: Location, url: &str) -> RemoteBackend {
        RemoteBackend {
            location,
            api: wfhost_client::Client::new(url).map_err(|e| e.message().to_string()),
        }
    }

    pub(crate) fn authorized(&self, token: &str) -> RemoteBackend {
        RemoteBackend {
            location: self.location.clone(),
            api: self.api.clone().map(|api| api.with_token(token)),
        }
    }

    pub(crate) fn trusting(&self, pem: &[u8]) -> Result<RemoteBackend> {
        let api = match &self.api {
            Ok(api) => Ok(api
                .clone()
                .with_root_certificates(pem)
                .map_err(|e| error(&e))?),
            Err(why) => Err(why.clone()),
        };
        Ok(RemoteBackend {
            location: self.location.clone(),
            api,
        })
    }

    fn api(&self) -> Result<&wfhost_client::Client> {
        self.api
            .as_ref()
            .map_err(|why| Error::new(ErrorKind::Config, why.clone()))
    }
}

impl Backend for RemoteBackend {
    fn location(&self) -> &Location {
        &self.location
    }

    fn put_module(&self, wasm: &[u8], name: Option<&str>) -> Result<StoredModule> {
        let api = self.api()?;
        let (module, new) = match name {
            Some(name) => api.put_module_named(wasm, name),
            None => api.put_module(wasm),
        }
        .map_err(|e| error(&e))?;
        Ok(stored_of(module, new))
    }

    fn modules(&self) -> Result<Vec<StoredModule>> {
        let list = self.api()?.modules().map_err(|e| error(&e))?;
        Ok(list
            .modules
            .into_iter()
            .map(|module| stored_of(module, false))
            .collect())
    }

    fn start(&self, start: &Start<'_>) -> Result<Started> {
        let hash = match start.module {
            ModuleRef::Bytes(bytes) => self.put_module(bytes, None)?.hash,
            // The server reads names.
            ModuleRef::Hash(module) | ModuleRef::Named(module) => module.to_string(),
        };
        let input = json_of(start.input, "the input")?;
        // The id is made here, not by the server: a start retried after a lost answer is the
        // same start.
        let request = StartRequest {
            id: Some(start.id.map_or_else(super::new_id, str::to_string)),
            module: hash,
            entry: start.entry.to_string(),
            input,
        };
        let started = match start.trace {
            Some(parent) => self.api()?.clone().with_traceparent(parent).start(&request),
            None => self.api()?.start(&request),
        }
        .map_err(|e| error(&e))?;
        Ok(Started {
            id: started.workflow.id.clone(),
            new: started.new,
            workflow: status_of(started.workflow)?,
        })
    }

    fn status(&self, id: &str) -> Result<WorkflowStatus> {
        status_of(self.api()?.status(id).map_err(|e| error(&e))?)
    }

    /// A server caps each wait: a longer one asks again until the workflow ends or the wait
    /// is over.
    fn result(&self, id: &str, wait: Option<Duration>) -> Result<WorkflowStatus> {
        let deadline = wait.and_then(|wait| std::time::Instant::now().checked_add(wait));
        loop {
            let left = match (wait, deadline) {
                (None, _) => None,
                (Some(_), Some(deadline)) => {
                    Some(deadline.saturating_duration_since(std::time::Instant::now()))
                }
                // Too long to add: as good as for ever.
                (Some(_), None) => Some(ASK_AT_MOST),
            };
            let asked = left.map(|left| left.min(ASK_AT_MOST));
            let answer = match self.api()?.result(id, asked) {
                // The API's client asked again for its `retry_for`; a server that takes longer
                // to come back (a long recovery) is asked again within the wait.
                Err(e) if e.status() == Some(503) && left.is_some_and(|l| l > RETRY_AFTER) => {
                    std::thread::sleep(RETRY_AFTER);
                    continue;
                }
                answer => answer.map_err(|e| error(&e))?,
            };
            let status = status_of(answer)?;
            if status.is_finished() || left.is_none_or(|left| left <= ASK_AT_MOST) {
                return Ok(status);
            }
        }
    }

    fn send(&self, id: &str, message: &Payload) -> Result<u64> {
        let message = json_of(message, "a message")?;
        Ok(self
            .api()?
            .send(id, &message)
            .map_err(|e| error(&e))?
            .message)
    }

    fn cancel(&self, id: &str) -> Result<Cancelled> {
        let answer = self.api()?.cancel(id).map_err(|e| error(&e))?;
        Ok(match answer.cancel.as_str() {
            "asked" => Cancelled::Asked,
            "asked_before" => Cancelled::AskedBefore,
            _ => Cancelled::Ended(state_of(&answer.status)?),
        })
    }

    fn pause(&self, id: &str, paused: bool) -> Result<PauseChange> {
        let api = self.api()?;
        let answer = if paused {
            api.pause(id)
        } else {
            api.unpause(id)
        }
        .map_err(|e| error(&e))?;
        Ok(match answer.pause.as_str() {
            "done" => PauseChange::Done,
            "already" => PauseChange::Already,
            _ => PauseChange::Ended(state_of(&answer.status)?),
        })
    }

    fn upgrade(&self, id: &str, wasm: &[u8]) -> Result<crate::Upgraded> {
        let (module, _) = self.api()?.put_module(wasm).map_err(|e| error(&e))?;
        self.upgrade_stored(id, &module.hash)
    }

    fn upgrade_stored(&self, id: &str, module: &str) -> Result<crate::Upgraded> {
        let answer = self.api()?.upgrade(id, module).map_err(|e| error(&e))?;
        Ok(crate::Upgraded {
            from: answer.from,
            to: answer.to,
            steps: answer.steps,
            already: answer.already,
        })
    }

    fn reset(
        &self,
        id: &str,
        to_step: Option<u64>,
        module: Option<super::ModuleRef<'_>>,
    ) -> Result<crate::WorkflowReset> {
        let module = match module {
            None => None,
            Some(super::ModuleRef::Hash(hash) | super::ModuleRef::Named(hash)) => {
                Some(hash.to_string())
            }
            Some(super::ModuleRef::Bytes(wasm)) => {
                let (stored, _) = self.api()?.put_module(wasm).map_err(|e| error(&e))?;
                Some(stored.hash)
            }
        };
        let request = wire::ResetRequest { to_step, module };
        let answer = self.api()?.reset(id, &request).map_err(|e| error(&e))?;
        Ok(crate::WorkflowReset {
            id: answer.id,
            run: answer.run,
            previous: answer.previous,
            steps: answer.steps,
            module: answer.module,
            messages: answer.messages,
        })
    }

    fn waits(&self, id: &str) -> Result<super::Waits> {
        let answer = self.api()?.waits(id).map_err(|e| error(&e))?;
        let open = answer
            .waits
            .iter()
            .map(|wait| {
                let bytes = wire::hex(&wait.record)
                    .ok_or_else(|| bad_answer("a yield's record that is not hex"))?;
                let yielded = postcard::from_bytes(&bytes)
                    .map_err(|_| bad_answer("a yield's record that does not decode"))?;
                Ok(super::OpenYield {
                    yielded,
                    fires_at: wait.fires_at,
                    unserved: wait.unserved.clone(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(super::Waits {
            steps: answer.steps,
            open,
            message: answer.message,
        })
    }

    fn prune(
        &self,
        query: &super::PruneQuery,
        _deadline: Option<Instant>,
    ) -> Result<super::Pruned> {
        let request = wfhost_client::wire::PruneRequest {
            older_than: None,
            finished_before: Some(query.finished_before),
            status: query.status.map(|s| s.name().to_string()),
        };
        // The server answers after a while with what it did so far; asked again, it goes on.
        let mut pruned = super::Pruned::default();
        loop {
            let answer = self.api()?.prune(&request).map_err(|e| error(&e))?;
            pruned.trees += answer.trees;
            pruned.workflows += answer.workflows;
            if !answer.more {
                pruned.left = answer.left;
                return Ok(pruned);
            }
        }
    }

    fn counts(&self, query: &ListQuery) -> Result<WorkflowCounts> {
        let params = CountParams {
            entry: query.entry.clone(),
            prefix: query.prefix.clone(),
            started_before: query.started_before,
            started_after: query.started_after,
            top_level: query.top_level.then_some(true),
            parent: query.parent,
        };
        let counts = self.api()?.counts(&params).map_err(|e| error(&e))?;
        Ok(WorkflowCounts {
            running: counts.running,
            paused: counts.paused,
            damaged: counts.damaged,
            completed: counts.completed,
            failed: counts.failed,
            cancelled: counts.cancelled,
        })
    }

    fn list(&self, query: &ListQuery) -> Result<Page<WorkflowStatus>> {
        query.check()?;
        let params = ListParams {
            status: query.state.map(|s| s.name().to_string()),
            entry: query.entry.clone(),
            prefix: query.prefix.clone(),
            started_before: query.started_before,
            started_after: query.started_after,
            top_level: query.top_level.then_some(true),
            parent: query.parent,
            limit: Some(query.limit),
            after: query.after.clone(),
        };
        let page = self.api()?.list(&params).map_err(|e| error(&e))?;
        Ok(Page {
            items: page
                .workflows
                .into_iter()
                .map(status_of)
                .collect::<Result<_>>()?,
            next: page.next,
        })
    }

    fn history(&self, id: &str, after: Option<&str>, limit: usize) -> Result<Page<HistoryStep>> {
        let params = HistoryParams {
            after: after.map(str::to_string),
            limit: Some(limit),
        };
        let page = self.api()?.history(id, &params).map_err(|e| error(&e))?;
        let mut items = Vec::with_capacity(page.steps.len());
        for step in page.steps {
            let bytes = wire::hex(&step.record)
                .ok_or_else(|| bad_answer("a step's record that is not hex"))?;
            let record = StepRecord::decode(&bytes).map_err(|e| {
                Error::new(
                    ErrorKind::Damaged,
                    format!("step {} of '{id}' does not decode: {e}", step.step),
                )
            })?;
            items.push(HistoryStep::of(step.step, step.at, record, bytes));
        }
        Ok(Page {
            items,
            next: page.next,
        })
    }

    fn outbox(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
        wait: Option<Duration>,
    ) -> Result<OutboxPage> {
        let params = OutboxParams {
            after: after.map(str::to_string),
            limit: Some(limit),
            wait: wait.map(wfhost_client::duration::format),
        };
        let page = self.api()?.outbox(id, &params).map_err(|e| error(&e))?;
        let status = self.status(id)?;
        Ok(OutboxPage {
            number: status.number,
            messages: page
                .messages
                .into_iter()
                .map(|m| {
                    Ok(OutboxMessage {
                        tag: m.tag,
                        at: m.at,
                        data: payload(&m.data, m.data_encoding.as_deref())?,
                    })
                })
                .collect::<Result<_>>()?,
            next: page.next,
            finished: page.finished,
        })
    }

    fn hosts(&self) -> Result<Vec<HostStatus>> {
        let list = self.api()?.hosts().map_err(|e| error(&e))?;
        Ok(list
            .hosts
            .into_iter()
            .map(|host| HostStatus {
                id: host.id,
                name: host.name,
                alive: host.alive,
                lease_until: host.lease_until,
                workflows: host.workflows,
                this: host.this,
            })
            .collect())
    }

    fn ready(&self) -> Result<()> {
        self.api()?.ready().map(drop).map_err(|e| error(&e))
    }

    /// A server names the workflows a history mentions in its own words; it answers no
    /// lookup by number.
    fn id_of(&self, _number: u64) -> Result<Option<String>> {
        Ok(None)
    }

    fn takes_work(&self) -> Result<()> {
        self.ready()
    }

    fn module(&self, _hash: &str) -> Result<Option<Vec<u8>>> {
        Err(Error::new(
            ErrorKind::Config,
            "a server does not hand out modules' bytes: read them from its store",
        ))
    }

    /// A server fires its schedules itself.
    fn with_token(&self, token: &str) -> Option<Arc<dyn Backend>> {
        Some(Arc::new(self.authorized(token)))
    }

    fn with_root_certificates(&self, pem: &[u8]) -> Result<Option<Arc<dyn Backend>>> {
        Ok(Some(Arc::new(self.trusting(pem)?)))
    }
}

impl Schedules for RemoteBackend {
    fn create_schedule(
        &self,
        schedule: &crate::schedules::NewSchedule,
    ) -> Result<crate::schedules::Schedule> {
        use crate::schedules::When;
        let (cron, time_zone, every) = match &schedule.when {
            When::Cron { expression, zone } => (Some(expression.clone()), Some(zone.clone()), None),
            When::Every(interval) => (None, None, Some(wfhost_client::duration::format(*interval))),
        };
        let request = wire::ScheduleRequest {
            id: schedule.id.clone(),
            cron,
            every,
            time_zone,
            module: schedule.module.clone(),
            entry: schedule.entry.clone(),
            input: json_of(&schedule.input, "the input")?,
            overlap: Some(schedule.overlap.name().to_string()),
            catch_up: Some(schedule.catch_up.name()),
            jitter: Some(wfhost_client::duration::format(schedule.jitter)),
        };
        schedule_of(
            self.api()?
                .create_schedule(&request)
                .map_err(|e| error(&e))?,
        )
    }

    fn schedules(&self) -> Result<Vec<crate::schedules::Schedule>> {
        let list = self.api()?.schedules().map_err(|e| error(&e))?;
        list.schedules.into_iter().map(schedule_of).collect()
    }

    fn schedule(&self, id: &str) -> Result<crate::schedules::Schedule> {
        schedule_of(self.api()?.schedule(id).map_err(|e| error(&e))?)
    }

    fn pause_schedule(&self, id: &str, paused: bool) -> Result<bool> {
        let verb = if paused { "pause" } else { "resume" };
        let answer = self
            .api()?
            .change_schedule(id, verb)
            .map_err(|e| error(&e))?;
        Ok(answer.changed)
    }

    fn delete_schedule(&self, id: &str) -> Result<bool> {
        let answer = self.api()?.delete_schedule(id).map_err(|e| error(&e))?;
        Ok(answer.changed)
    }

    fn trigger_schedule(&self, id: &str) -> Result<Started> {
        let started = self.api()?.trigger_schedule(id).map_err(|e| error(&e))?;
        Ok(Started {
            id: started.workflow.id.clone(),
            new: started.new,
            workflow: status_of(started.workflow)?,
        })
    }

    fn fire_schedules(&self, _since: Option<u64>) -> Result<super::Fired> {
        Ok(super::Fired {
            at: crate::durable::now_millis(),
            ..super::Fired::default()
        })
    }
}

/// A call's error, in the library's kinds: the server's code when it is one of them.
fn error(error: &wfhost_client::Error) -> Error {
    let kind = ErrorKind::from_name(error.code()).unwrap_or(match error.code() {
        "unauthorized" | "forbidden" => ErrorKind::NotAllowed,
        "bad_request" => ErrorKind::InvalidInput,
        "too_large" => ErrorKind::Limit,
        "not_found" => ErrorKind::UnknownWorkflow,
        "bad_answer" => ErrorKind::BadOutput,
        _ => ErrorKind::Unavailable,
    });
    let message = match error.status() {
        Some(401) => format!(
            "{} (the server wants its token: set WFHOST_TOKEN, or give --token-file)",
            error.message()
        ),
        _ => error.message().to_string(),
    };
    Error::new(kind, message)
}

fn bad_answer(what: &str) -> Error {
    Error::new(
        ErrorKind::BadOutput,
        format!("the server answered {what}: is it a wfhost server of the same version?"),
    )
}

/// `payload` as the JSON a server takes: JSON payloads only.
fn json_of(payload: &Payload, what: &str) -> Result<Box<serde_json::value::RawValue>> {
    if payload.encoding != Encoding::Json {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "{what} is {}, and a server takes JSON: encode it as JSON",
                payload.encoding.name()
            ),
        ));
    }
    let text = std::str::from_utf8(&payload.bytes)
        .map_err(|_| Error::new(ErrorKind::InvalidInput, format!("{what} is not UTF-8 JSON")))?;
    serde_json::value::RawValue::from_string(text.trim().to_string())
        .map_err(|e| Error::new(ErrorKind::InvalidInput, format!("{what} is not JSON: {e}")))
}

fn payload(raw: &serde_json::value::RawValue, encoding: Option<&str>) -> Result<Payload> {
    wire::payload_of(raw, encoding).map_err(|why| bad_answer(&why))
}

fn state_of(name: &str) -> Result<WorkflowState> {
    WorkflowState::parse(name).ok_or_else(|| bad_answer(&format!("a status '{name}'")))
}

/// A module as the server showed it.
fn stored_of(module: wire::ModuleJson, new: bool) -> StoredModule {
    let mut stored = StoredModule::inspected(&module.hash, &[]);
    stored.entry_points = module.entry_points;
    stored.size = module.size;
    stored.new = new;
    stored.names = module
        .names
        .into_iter()
        .map(|n| super::ModuleVersion {
            name: n.name,
            version: n.version,
        })
        .collect();
    stored
}

/// A workflow as the server showed it.
fn status_of(json: WorkflowJson) -> Result<WorkflowStatus> {
    let state = state_of(&json.status)?;
    let input = payload(&json.input, json.input_encoding.as_deref()).ok();
    let result = match &json.result {
        Some(raw) => Some(payload(raw, json.result_encoding.as_deref())?),
        None => None,
    };
    Ok(WorkflowStatus {
        id: json.id,
        number: json.number,
        parent: json.parent,
        state,
        entry: json.entry,
        module: json.module,
        module_name: json.module_name,
        input,
        started: json.started,
        finished: json.finished,
        steps: json.steps,
        result,
        error: json.error.map(|e| Failure {
            kind: e.kind,
            message: e.message,
        }),
        damaged: json.damaged,
        unread: json.unread_messages,
        host: json.host,
        waiting_for_host: json.waiting_for_host,
        cancel_asked: json.cancel_asked,
        paused: json.paused,
        run: json.run,
    })
}

/// A schedule as the server showed it.
fn schedule_of(json: wire::ScheduleJson) -> Result<crate::schedules::Schedule> {
    use crate::schedules::{Schedule, When};
    let when = match (json.cron, json.every_ms) {
        (Some(cron), _) => When::cron(&cron, json.time_zone.as_deref().unwrap_or("UTC")),
        (None, Some(ms)) => When::every(Duration::from_millis(ms)),
        (None, None) => return Err(bad_answer("a schedule without a time")),
    }
    .map_err(|_| bad_answer("a schedule's time"))?;
    Ok(Schedule {
        id: json.id,
        when,
        module: json.module,
        module_name: String::new(),
        entry: json.entry,
        input: payload(&json.input, None)?,
        overlap: json
            .overlap
            .parse()
            .map_err(|_| bad_answer("an overlap policy"))?,
        catch_up: json
            .catch_up
            .parse()
            .map_err(|_| bad_answer("a catch-up policy"))?,
        jitter: Duration::from_millis(json.jitter_ms),
        paused: json.paused,
        next_fire: json.next_fire,
        last_workflow: json.last_workflow,
        buffered: json.buffered,
        fired: json.fired,
        created: json.created,
    })
}
