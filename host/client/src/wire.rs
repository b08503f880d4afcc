//! The JSON the HTTP API speaks, one type per body: what the server writes and what clients
//! read, so that the two (and the OpenAPI document, made from these types) cannot disagree.
//!
//! Payloads (inputs, results, messages) are JSON when they are JSON, byte for byte as the
//! workflow or the client wrote them ([`RawValue`]). A payload in another encoding (a guest may
//! answer in postcard) is an object `{"encoding", "size", "bytes"}` (the bytes in hex), and the
//! field beside it that names its encoding (`input_encoding`, `result_encoding`) says so.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use wfcontract::{Encoding, Payload};

#[cfg(feature = "openapi")]
use utoipa::{IntoParams, ToSchema};

/// Every error: `{"error": {"code", "message"}}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// What went wrong, for programs (`code`) and for people (`message`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ErrorDetail {
    /// A word programs can match. The request's: `bad_request` (JSON, a parameter, an id),
    /// `unauthorized` (no token, or another), `cross_origin`, `not_loopback`, `not_found` (no
    /// such route), `method_not_allowed`, `too_large` (the body), `timeout` (the request took
    /// too long), `too_many_waiting`, `too_many_connections`, `too_many_requests` (over HTTP/2,
    /// the requests at once). The operation's, one per kind of
    /// the library's errors (`wfhost::ErrorKind::name`): `unknown_workflow`, `unknown_module`,
    /// `unknown_entry`, `bad_module`, `invalid_input`, `trap`, `conflict`, `limit`,
    /// `damaged`, `unavailable`, `store`, `shutting_down`, `no_such_process`, ...
    pub code: String,
    /// What was wrong and what to do about it.
    pub message: String,
}

/// A module the store keeps (`POST /v1/modules`, `GET /v1/modules`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ModuleJson {
    /// Its SHA-256, in hex: how a start names it.
    pub hash: String,
    /// The workflows it can start.
    pub entry_points: Vec<String>,
    /// Its size in bytes.
    pub size: u64,
    /// The names it was uploaded under, with its version of each (stored with `?name=`: the
    /// one it was given).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<ModuleNameJson>,
}

/// A version of a module name: `orders` version 3 is `orders@3` in a start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ModuleNameJson {
    /// The name.
    pub name: String,
    /// Its version: 1, and one more at each upload of other bytes under the name.
    pub version: u64,
}

/// Which name a module is stored under (`POST /v1/modules?name=orders`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct ModuleParams {
    /// A name for it: it takes the name's next version (unless it is the name's latest
    /// already), and a start may name it so (`orders`, or `orders@3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The modules the store keeps (`GET /v1/modules`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ModuleList {
    /// Each module, by hash.
    pub modules: Vec<ModuleJson>,
}

/// A start (`POST /v1/workflows`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// The workflow's id; without one, the server makes one (`wf-` and 16 hex digits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The module: the SHA-256 of a stored module (`POST /v1/modules` answers it), a name it
    /// was stored under (its latest version), or `name@version`.
    pub module: String,
    /// The entry point to start.
    pub entry: String,
    /// The input, any JSON value (`null` when left out).
    #[serde(default = "null")]
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub input: Box<RawValue>,
}

/// JSON's `null`.
pub fn null() -> Box<RawValue> {
    RawValue::from_string("null".into()).expect("null is JSON")
}

/// How a workflow failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct FailureJson {
    /// The kind: `failed`, `trap`, `limit`, `cancelled`, `nondeterminism`, ...
    pub kind: String,
    /// What happened.
    pub message: String,
}

/// Where a workflow stands (`GET /v1/workflows/{id}`, and each row of a listing).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct WorkflowJson {
    /// Its id.
    pub id: String,
    /// `running`, `paused` (by an operator), `damaged` (its journal cannot be read back: it is
    /// left as it was), `completed`, `failed` or `cancelled`: the three first are unfinished.
    pub status: String,
    /// Its entry point.
    pub entry: String,
    /// The SHA-256 of its module.
    pub module: String,
    /// The name its module goes by.
    pub module_name: String,
    /// Its number in the store (its pid while it runs).
    pub number: u64,
    /// The number of the workflow that spawned it, if one did.
    pub parent: Option<u64>,
    /// When it started, in milliseconds since the Unix epoch.
    pub started: u64,
    /// When it finished, once it has.
    pub finished: Option<u64>,
    /// Steps journaled.
    pub steps: u64,
    /// Unfinished: the host that runs it, in words, if one is known.
    pub host: Option<String>,
    /// Unfinished and no live host runs it: it waits for one.
    pub waiting_for_host: bool,
    /// Its input (`null` if it does not decode).
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub input: Box<RawValue>,
    /// The input's encoding, when it is not JSON (`input` is then `{"encoding", "size",
    /// "bytes"}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_encoding: Option<String>,
    /// Its result, once it completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub result: Option<Box<RawValue>>,
    /// The result's encoding, when it is not JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_encoding: Option<String>,
    /// Its failure, once it failed or was cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<FailureJson>,
    /// Why its journal cannot be read back, if a host found it so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damaged: Option<String>,
    /// Messages waiting for it (or never read, once it ended).
    pub unread_messages: u64,
    /// A cancel was asked for it.
    pub cancel_asked: bool,
    /// Paused by an operator: it takes no step until unpaused (its status is `paused`, unless
    /// it is also damaged).
    #[serde(default)]
    pub paused: bool,
    /// Its number among the runs of its id: 1, and one more at each reset (the runs before are
    /// kept as `<id>/run-1`, `<id>/run-2`, ...).
    #[serde(default = "first_run")]
    pub run: u64,
}

fn first_run() -> u64 {
    1
}

/// The statuses of a workflow that has not finished.
pub const UNFINISHED: [&str; 3] = ["running", "paused", "damaged"];

impl WorkflowJson {
    /// Whether it has finished.
    pub fn is_finished(&self) -> bool {
        !UNFINISHED.contains(&self.status.as_str())
    }
}

/// What a start did: the workflow as it stands, and whether this start made it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct StartedJson {
    /// Whether this start wrote it (`201`); `false` when it existed with the same module,
    /// entry point and input (`200`).
    pub new: bool,
    /// The workflow.
    pub workflow: WorkflowJson,
}

/// Declares a query with its own fields and then the filters that a listing and its counts
/// share: entry point, id prefix, start time, top level, parent.
macro_rules! with_workflow_filters {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($(#[$field_meta:meta])* pub $field:ident: $ty:ty,)*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $($(#[$field_meta])* pub $field: $ty,)*
            /// Only those of this entry point.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub entry: Option<String>,
            /// Only those whose id starts so.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub prefix: Option<String>,
            /// Only those started before this time (milliseconds since the Unix epoch).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub started_before: Option<u64>,
            /// Only those started at or after this time.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub started_after: Option<u64>,
            /// Only top-level workflows (not the children they spawned).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub top_level: Option<bool>,
            /// Only the children of the workflow with this number (its `number`).
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub parent: Option<u64>,
        }
    };
}

with_workflow_filters! {
    /// Which workflows a listing shows (`GET /v1/workflows`), and how many.
    #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
    #[cfg_attr(feature = "openapi", derive(IntoParams))]
    #[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
    #[serde(deny_unknown_fields)]
    pub struct ListParams {
        /// Only those that stand so: `running`, `paused`, `damaged`, `completed`, `failed` or
        /// `cancelled`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub status: Option<String>,
        /// At most this many (1 to 10,000; default 100).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub limit: Option<usize>,
        /// The `next` of the page before.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub after: Option<String>,
    }
}

with_workflow_filters! {
    /// Which workflows counts take in (`GET /v1/workflow-counts`): a listing's filters but the
    /// status.
    #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
    #[cfg_attr(feature = "openapi", derive(IntoParams))]
    #[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
    #[serde(deny_unknown_fields)]
    pub struct CountParams {}
}

/// How many workflows stand each way (`GET /v1/workflow-counts`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct CountsJson {
    /// Not finished, and neither paused nor damaged.
    pub running: u64,
    /// Not finished, and paused by an operator.
    #[serde(default)]
    pub paused: u64,
    /// Not finished, and damaged (its journal cannot be read back).
    #[serde(default)]
    pub damaged: u64,
    /// Finished with a result.
    pub completed: u64,
    /// Finished with a failure other than a cancel.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
}

/// A page of workflows (`GET /v1/workflows`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct WorkflowPage {
    /// The workflows, oldest first.
    pub workflows: Vec<WorkflowJson>,
    /// The cursor of the next page (`after=`); `null` at the end.
    pub next: Option<String>,
}

/// Where a page of a workflow's history starts, and how many steps it holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct HistoryParams {
    /// The `next` of the page before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// At most this many steps (1 to 10,000; default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// Where a page of a workflow's messages to the host starts, how many it holds, and how long
/// to wait for one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct OutboxParams {
    /// The `next` of the page before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// At most this many messages (1 to 10,000; default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// How long to wait for a message when none follows the cursor and the workflow runs
    /// (`30s`, `500ms`; capped by the server). None: answer at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<String>,
}

/// How long to wait (`GET /v1/workflows/{id}/result`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct WaitParams {
    /// How long to wait for the workflow to end (`30s`, `500ms`, `2m`; capped by the server).
    /// None: answer at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<String>,
}

/// One journaled step (`GET /v1/workflows/{id}/history`): as `wfhost history --json` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct StepJson {
    /// Its position, from 1.
    pub step: u64,
    /// When it ran, in milliseconds since the Unix epoch.
    pub at: u64,
    /// Milliseconds since the step before (none for the first).
    pub after_ms: Option<u64>,
    /// The events it took, in delivery order, each with `kind` and `words`.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub events: Vec<serde_json::Value>,
    /// What it read from WASI (clocks, randomness), in words.
    pub reads: Vec<String>,
    /// What it yielded, each with `tag`, `kind` and `words`.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub yields: Vec<serde_json::Value>,
    /// Its status after the step: `continue`, `wait`, `idle`, `{"done": ...}`,
    /// `{"failed": ...}` or `{"cancelled": ...}`.
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub status: serde_json::Value,
    /// The step exactly, for wfhost's own clients: its record as the journal keeps it
    /// (postcard), in hex.
    pub record: String,
}

/// A page of a workflow's journal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct HistoryPage {
    /// The steps, in order.
    pub steps: Vec<StepJson>,
    /// The cursor of the next page; `null` at the end (so far).
    pub next: Option<String>,
}

/// What a workflow waits for now (`GET /v1/workflows/{id}/waits`), as of the last step its
/// journal holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct WaitsJson {
    /// The steps its journal holds.
    pub steps: u64,
    /// The commands it yielded that nothing has answered yet, in the order it yielded them.
    pub waits: Vec<WaitJson>,
    /// Whether it waits for a message: its last step asked for messages and it has not ended.
    pub message: bool,
}

/// A command a workflow waits on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct WaitJson {
    /// For a timer: when it fires, in milliseconds since the Unix epoch.
    pub fires_at: Option<u64>,
    /// The command, as a step's `yields` show it: `tag`, `kind`, `words` and its fields.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub yielded: serde_json::Value,
    /// The command exactly, for wfhost's own clients: the yield as the journal keeps it
    /// (postcard), in hex.
    pub record: String,
    /// For a host function's call the host running the workflow does not serve: why it is not
    /// answered, and what would serve it (the call waits for a host that does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unserved: Option<String>,
}

/// A message a workflow sent the host.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct OutboxMessage {
    /// Its position among the workflow's messages to the host (the tag of the `send`).
    pub tag: u64,
    /// When it was sent, in milliseconds since the Unix epoch.
    pub at: u64,
    /// What it holds.
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub data: Box<RawValue>,
    /// Its encoding, when it is not JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_encoding: Option<String>,
}

/// The messages a workflow sent the host (`GET /v1/workflows/{id}/outbox`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct OutboxPage {
    /// The messages after the cursor, in order.
    pub messages: Vec<OutboxMessage>,
    /// The cursor to ask for what follows (`after=`): always given, as more may come while the
    /// workflow runs.
    pub next: String,
    /// Whether the workflow had finished when this page was read: nothing follows it.
    pub finished: bool,
}

/// A message for a workflow was written (`POST /v1/workflows/{id}/messages`, `202`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct SentJson {
    /// The message's number in the store.
    pub message: u64,
}

/// What a cancel did (`POST /v1/workflows/{id}/cancel`, `202`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct CancelJson {
    /// `asked` (written for its host to deliver), `asked_before`, or `ended` (it had finished:
    /// nothing to cancel).
    pub cancel: String,
    /// Where the workflow stands: `running` (or `paused`, `damaged`), or how it ended.
    pub status: String,
}

/// What a pause or an unpause did (`POST /v1/workflows/{id}/pause`, `.../unpause`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PauseJson {
    /// `done` (written; its host holds or wakes it), `already` (it was so), or `ended` (it had
    /// finished: nothing to pause).
    pub pause: String,
    /// Whether it is paused now.
    pub paused: bool,
    /// Where the workflow stands: `paused` or `running` (or `damaged`), or how it ended.
    pub status: String,
}

/// A schedule to create (`POST /v1/schedules`): `cron` (seconds first, in `time_zone`) or
/// `every`, the module (a SHA-256 the store keeps), entry point and input of each firing, and
/// its policies.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ScheduleRequest {
    /// Its id; each firing starts workflow `<id>@<the firing's time>`.
    pub id: String,
    /// A cron expression, seconds first: `0 */5 * * * *` is every five minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// Or an interval: `30s`, `10m`, `1h`, `1d`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    /// The time zone `cron` is read in (an IANA name); default `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// The SHA-256 of a stored module (`POST /v1/modules` answers it).
    pub module: String,
    /// The entry point each firing starts.
    pub entry: String,
    /// The input of each firing's workflow, any JSON value (`null` when left out).
    #[serde(default = "null")]
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub input: Box<RawValue>,
    /// While the last firing's workflow runs: `skip` (the default), `buffer-one`, `allow-all`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<String>,
    /// Firings missed while no host ran: `skip` (the default), `last`, `all:N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catch_up: Option<String>,
    /// Each firing starts up to this much after its time (`30s`); default none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<String>,
}

/// A schedule.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ScheduleJson {
    /// Its id.
    pub id: String,
    /// When it fires, in words.
    pub when: String,
    /// Its cron expression, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The time zone of its cron expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// Its interval in milliseconds, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_ms: Option<u64>,
    /// The module's SHA-256.
    pub module: String,
    /// The entry point.
    pub entry: String,
    /// The input of each firing.
    #[cfg_attr(feature = "openapi", schema(value_type = Value))]
    pub input: Box<RawValue>,
    /// `skip`, `buffer-one` or `allow-all`.
    pub overlap: String,
    /// `skip`, `last` or `all:N`.
    pub catch_up: String,
    /// The jitter, in milliseconds.
    pub jitter_ms: u64,
    /// Paused: it does not fire until resumed.
    pub paused: bool,
    /// Its next firing, in milliseconds since the Unix epoch (absent: never again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_fire: Option<u64>,
    /// The workflow its last firing started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_workflow: Option<String>,
    /// A firing waiting for that workflow to end, by its time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffered: Option<u64>,
    /// Workflows it has started.
    pub fired: u64,
    /// When it was created, in milliseconds since the Unix epoch.
    pub created: u64,
}

/// Every schedule (`GET /v1/schedules`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ScheduleList {
    /// By id.
    pub schedules: Vec<ScheduleJson>,
}

/// What a pause, resume or delete of a schedule did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ScheduleChangeJson {
    /// Whether it changed anything (`false`: it was so already).
    pub changed: bool,
}

/// New code for a running workflow (`POST /v1/workflows/{id}/upgrade`): a module the store
/// keeps (`POST /v1/modules` first), by its SHA-256.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct UpgradeRequest {
    /// The new module: its SHA-256, as `POST /v1/modules` answered it, a name it was stored
    /// under (its latest version), or `name@version`.
    pub module: String,
}

/// A reset of a finished workflow (`POST /v1/workflows/{id}/reset`): a new run keeps its
/// journal up to a step and goes on from there.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ResetRequest {
    /// The last step the new run keeps (0: none, it starts over). Left out: the step before the
    /// one that ended the run (or took its cancel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_step: Option<u64>,
    /// A module the store keeps (`POST /v1/modules` first), by its SHA-256, a name or
    /// `name@version`, to run in place of the workflow's own: it must replay the steps kept.
    /// Left out: its own module.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
}

/// What a reset did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct ResetJson {
    /// The workflow's id: the new run's.
    pub id: String,
    /// The new run's number among the runs of its id.
    pub run: u64,
    /// The id the run before is kept under.
    pub previous: String,
    /// The steps the new run kept (replayed, not run again).
    pub steps: u64,
    /// The SHA-256 of the module the new run runs.
    pub module: String,
    /// Messages the run before took after the steps kept, sent again to the new run.
    pub messages: u64,
}

/// The runs of one id (`GET /v1/workflows/{id}/runs`), first to last.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct RunsJson {
    /// The runs resets ended (their ids `<id>/run-1`, ...), then the one the id names now.
    pub runs: Vec<WorkflowJson>,
}

/// What an upgrade did. A refused one is a 409 whose message names the step that differs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct UpgradeJson {
    /// The module's SHA-256 the workflow ran.
    pub from: String,
    /// The module's SHA-256 it runs from now on.
    pub to: String,
    /// The steps of its journal the new module replayed the same.
    pub steps: u64,
    /// It ran that module already: nothing changed.
    pub already: bool,
}

/// Which finished workflows to remove (`POST /v1/prune`): top-level ones (each with its whole
/// tree) that finished more than `older_than` ago, or before `finished_before`; of one status
/// or any.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PruneRequest {
    /// How long ago they finished at the latest: `30d`, `12h`, `90m`, `45s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub older_than: Option<String>,
    /// Or: finished before this, in milliseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_before: Option<u64>,
    /// Only those that ended so: `completed`, `failed` or `cancelled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

/// What a prune removed (`POST /v1/prune`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PrunedJson {
    /// Top-level workflows removed, each with its tree.
    pub trees: u64,
    /// Workflows removed, children included.
    pub workflows: u64,
    /// Top-level workflows that matched but were left: part of their tree still runs.
    pub left: u64,
    /// The cutoff used, in milliseconds since the Unix epoch.
    pub finished_before: u64,
    /// The server stopped after a while (a request is answered within seconds) with more left
    /// to remove: ask again, with the same `finished_before`.
    pub more: bool,
}

/// A host of the store (`GET /v1/hosts`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct HostJson {
    /// Its number in the store (0 for the one host of a SQLite file).
    pub id: u64,
    /// Who it is: its machine's name and its process id.
    pub name: String,
    /// Whether its lease holds (a SQLite file's host: whether it holds the file).
    pub alive: bool,
    /// When its lease runs out, in milliseconds since the Unix epoch (none on a SQLite file).
    pub lease_until: Option<u64>,
    /// The unfinished workflows it owns.
    pub workflows: u64,
    /// Whether it is the host that answered this request.
    pub this: bool,
}

/// The hosts of the store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct HostList {
    /// Each host that is alive or owns unfinished workflows, by number.
    pub hosts: Vec<HostJson>,
}

/// Whether the server is ready (`GET /readyz`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct Health {
    /// `ok`, or what is wrong.
    pub status: String,
}

/// A worker's ask for a task (`POST /v1/tasks/poll`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PollRequest {
    /// The functions this worker serves.
    pub functions: Vec<String>,
    /// How long to wait for a task (`30s`; capped by the server). None: answer at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<String>,
    /// The worker's name, as `GET /v1/workers` shows its pollers (`billing-7`). None: its
    /// address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// The machine it runs on. None: its address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// The workers this server has seen and the tasks of each function (`GET /v1/workers`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct WorkersJson {
    /// Each function served (`--worker-function`), polled for, or with tasks, by name.
    pub functions: Vec<FunctionWorkersJson>,
}

/// One function's workers and tasks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct FunctionWorkersJson {
    /// The function.
    pub function: String,
    /// The workers that polled this server for it in the last hour, latest first.
    pub pollers: Vec<PollerJson>,
    /// Tasks waiting for a worker (of every host's workflows, on a store hosts share).
    pub waiting: u64,
    /// How long the oldest waiting task has waited since its call, in milliseconds.
    pub oldest_waiting_ms: Option<u64>,
    /// Tasks workers hold now.
    pub in_flight: u64,
    /// Completions with a result this server took since it started.
    pub completed: u64,
    /// Completions with an error this server took since it started.
    pub failed: u64,
}

/// A worker that polls for a function.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct PollerJson {
    /// Its name (the poll's `worker`, else its address).
    pub name: String,
    /// Its machine (the poll's `host`, else its address).
    pub host: String,
    /// When it last polled, RFC 3339.
    pub last_poll: String,
    /// The same, in milliseconds since the Unix epoch.
    pub last_poll_ms: u64,
    /// Whether a poll of its waits now.
    pub polling: bool,
}

/// A task for a worker: one call of a function it serves.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct TaskJson {
    /// This delivery's name, for `complete` and `heartbeat`.
    pub task: String,
    /// The function called.
    pub function: String,
    /// The call's input: the JSON the workflow sent.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub input: Box<RawValue>,
    /// The input's encoding, when it is not JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_encoding: Option<String>,
    /// The same for every attempt of this call, also after a restart of the host: do the
    /// effect once per key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Which delivery of the call this is, from 1.
    pub attempt: u32,
    /// When the task goes to another worker unless completed or heartbeaten (RFC 3339, UTC).
    pub deadline: String,
    /// The same, in milliseconds since the Unix epoch.
    pub deadline_ms: u64,
    /// How long from this answer to the deadline, by the server's clock, in milliseconds: what a
    /// worker times its heartbeats by (its own clock may differ from the server's).
    #[serde(default)]
    pub lease_ms: u64,
    /// When the server is traced: the W3C `traceparent` of the call's span, the parent of the
    /// worker's spans for the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// A worker's answer to a task (`POST /v1/tasks/{task}/complete`): a result or an error.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CompleteRequest {
    /// The function's result, any JSON: `null` is a result (a function that returns nothing).
    /// Absent when the completion is an error.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>, nullable = true))]
    pub result: Option<Box<RawValue>>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<TaskErrorJson>,
    /// Also take the next task, as a poll would: the answer is then `200` with it, or `204`
    /// when none came within the wait. One request a task instead of two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<PollRequest>,
}

/// A field that is there, whatever it holds: `null` included (serde reads a `null` into an
/// `Option` as `None`, as if the field were missing).
fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(deserializer).map(Some)
}

/// A worker's error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TaskErrorJson {
    /// What went wrong, for the workflow's history.
    pub message: String,
    /// Whether trying again may help (default true): the workflow's retry policy retries only
    /// errors that may.
    #[serde(default = "yes")]
    pub retryable: bool,
}

fn yes() -> bool {
    true
}

/// A task's new deadline (`POST /v1/tasks/{task}/heartbeat`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(ToSchema))]
pub struct HeartbeatJson {
    /// When the task goes to another worker unless completed or heartbeaten again.
    pub deadline: String,
    /// The same, in milliseconds since the Unix epoch.
    pub deadline_ms: u64,
    /// How long from this answer to the deadline, by the server's clock, in milliseconds: what a
    /// worker times its heartbeats by (its own clock may differ from the server's).
    #[serde(default)]
    pub lease_ms: u64,
}

/// A payload as the API shows it: the JSON itself when it is JSON, else `{"encoding", "size",
/// "bytes"}` with the encoding's name beside it.
pub fn payload_json(payload: &Payload) -> (Box<RawValue>, Option<String>) {
    if payload.encoding == Encoding::Json {
        if let Some(raw) = std::str::from_utf8(&payload.bytes)
            .ok()
            .and_then(|text| RawValue::from_string(text.trim().to_string()).ok())
        {
            return (raw, None);
        }
    }
    let hex: String = payload.bytes.iter().map(|b| format!("{b:02x}")).collect();
    let value = serde_json::json!({
        "encoding": payload.encoding.name(),
        "size": payload.bytes.len(),
        "bytes": hex,
    });
    let raw = serde_json::value::to_raw_value(&value).expect("an object is JSON");
    (raw, Some(payload.encoding.name().to_string()))
}

/// The payload the API showed as `raw`, with `encoding` beside it (see [`payload_json`]).
pub fn payload_of(raw: &RawValue, encoding: Option<&str>) -> Result<Payload, String> {
    let Some(encoding) = encoding else {
        return Ok(Payload::json_bytes(raw.get().as_bytes().to_vec()));
    };
    #[derive(Deserialize)]
    struct Shown {
        bytes: String,
    }
    let shown: Shown = serde_json::from_str(raw.get())
        .map_err(|e| format!("a {encoding} payload without its bytes: {e}"))?;
    let bytes = hex(&shown.bytes).ok_or_else(|| format!("'{}' is not hex", shown.bytes))?;
    Ok(match encoding {
        "json" => Payload::json_bytes(bytes),
        "postcard" => Payload::postcard_bytes(bytes),
        "bytes" => Payload::opaque(bytes),
        other => return Err(format!("an encoding wfhost does not know: '{other}'")),
    })
}

/// The bytes `text` holds in hex.
pub fn hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_payloads_pass_through_as_written() {
        let payload = Payload::json_bytes(br#"{"b":1,"a":[1, 2]}"#.to_vec());
        let (raw, encoding) = payload_json(&payload);
        assert_eq!(raw.get(), r#"{"b":1,"a":[1, 2]}"#);
        assert_eq!(encoding, None);
        assert_eq!(payload_of(&raw, None).unwrap(), payload);
    }

    #[test]
    fn other_payloads_show_their_encoding_and_bytes() {
        for payload in [
            Payload::postcard_bytes(vec![1, 2, 255]),
            Payload::opaque(vec![]),
            Payload::json_bytes(b"not json".to_vec()),
        ] {
            let (raw, encoding) = payload_json(&payload);
            let encoding = encoding.expect("not JSON");
            assert_eq!(encoding, payload.encoding.name());
            let shown: serde_json::Value = serde_json::from_str(raw.get()).unwrap();
            assert_eq!(shown["size"], payload.bytes.len());
            assert_eq!(payload_of(&raw, Some(&encoding)).unwrap(), payload);
        }
    }

    #[test]
    fn bad_hex_is_refused() {
        assert_eq!(hex("0g"), None);
        assert_eq!(hex("abc"), None);
        assert_eq!(hex("00ff"), Some(vec![0, 255]));
    }
}
