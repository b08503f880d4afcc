// Types of wfhost-client: a client of the HTTP API of `wfhost serve --http`, and an activity
// worker. Written by hand beside index.js; the server's own description of the API is
// GET /v1/openapi.json.

/** A JSON value: what inputs, results, messages and tasks carry. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A duration: seconds as a number (`0.5`), or a number and a unit as the API writes them
 * (`"500ms"`, `"30s"`, `"2m"`, `"1h"`, `"1d"`). */
export type Duration = number | string;

/** Where a workflow stands: `running`, `paused` (by an operator), `damaged` (its journal cannot
 * be read back), or how it ended: `completed`, `failed`, `cancelled`. */
export type WorkflowStatus =
  "running" | "paused" | "damaged" | "completed" | "failed" | "cancelled";

/** How a workflow failed or was cancelled. */
export interface Failure {
  /** The kind: `failed`, `trap`, `limit`, `cancelled`, `nondeterminism`, ... */
  kind: string;
  /** What happened (for a JavaScript workflow, the error and its stack). */
  message: string;
}

/** Options of a `Client`. */
export interface ClientOptions {
  /** Sent as `Authorization: Bearer` with every call (the server's `--token-file`). */
  token?: string;
  /** How long a call may take in milliseconds, its waits excepted (default 30,000). */
  timeout?: number;
  /** How long, in milliseconds from its first failure, a call asks a server that is starting
   * or restarting again (default 30,000; 0: never). */
  retryFor?: number;
  /** A W3C trace context (`00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`) sent as the
   * `traceparent` header with every call: a traced server (`wfhost serve --otlp-endpoint`)
   * makes its spans, and the workflows started, children of it. Not checked here beyond being
   * a string; a server ignores one it cannot read. A start's own `traceparent` wins. */
  traceparent?: string;
}

/** A module the store keeps. */
export interface ModuleInfo {
  /** Its SHA-256 in hex: how a start names it. */
  hash: string;
  /** The entry points it can start. */
  entryPoints: string[];
  /** Its size in bytes. */
  size: number;
  /** The names it was stored under, each with its version (empty when none); in what
   * `putModule` answers with a `name`, the version this upload has. */
  names: ModuleVersion[];
}

/** A version of a module name: `orders` version 3 is `orders@3` in a start. */
export interface ModuleVersion {
  /** The name. */
  name: string;
  /** Its version: 1, and one more at each upload of other bytes under the name. */
  version: number;
}

/** Options of `putModule`. */
export interface PutModuleOptions {
  /** A name to store it under too (1 to 100 ASCII letters, digits, `-`, `_` or `.`, a letter
   * first; anything else is a 400 `BadRequest`): it takes the name's next version, unless it
   * is the name's latest already. A start may then name it by the name (its latest version)
   * or `name@version`. */
  name?: string;
}

/** What `putModule` answers: the module, and whether this call stored it. */
export interface PutModule extends ModuleInfo {
  /** `false` when the store had it already. */
  new: boolean;
}

/** Options of a start. */
export interface StartOptions {
  /** The workflow's id; without one the server makes one (`wf-` and 16 hex digits). A start
   * with an id is safe to repeat, and so is asked again after a dropped connection. */
  id?: string;
  /** Also wait this long for it to end (`start`), or at most this long (`execute`: 60 s). */
  wait?: Duration;
  /** The W3C trace context this start joins, in place of the client's (`ClientOptions`): on
   * a traced server the workflow runs as a child of the request's span, a child of this. */
  traceparent?: string;
}

/** Where a workflow stands: the server's `WorkflowJson` in camelCase. */
export class Workflow {
  private constructor();
  /** Its id. */
  readonly id: string;
  readonly status: WorkflowStatus;
  /** Its entry point. */
  readonly entry: string;
  /** The SHA-256 of its module. */
  readonly module: string;
  /** The name its module goes by (the module's name when it was started by one). */
  readonly moduleName: string;
  /** Its number in the store (its pid while it runs). */
  readonly number: number;
  /** The number of the workflow that spawned it, or null. */
  readonly parent: number | null;
  readonly started: Date;
  /** When it finished, or null while it has not. */
  readonly finished: Date | null;
  /** Steps journaled. */
  readonly steps: number;
  /** Unfinished: the host that runs it, in words, if one is known. */
  readonly host: string | null;
  /** Unfinished, and no live host runs it. */
  readonly waitingForHost: boolean;
  readonly input: Json;
  /** The input's encoding when it is not JSON, else null. */
  readonly inputEncoding: string | null;
  /** Its result once it completed, else null. */
  readonly result: Json;
  /** The result's encoding when it is not JSON, else null. */
  readonly resultEncoding: string | null;
  /** Its failure once it failed or was cancelled, else null. */
  readonly error: Failure | null;
  /** Why its journal cannot be read back, if a host found it so. */
  readonly damaged: string | null;
  /** Paused by an operator. */
  readonly paused: boolean;
  /** Its number among the runs of its id: 1, and one more at each reset. */
  readonly run: number;
  /** A cancel was asked for it. */
  readonly cancelAsked: boolean;
  /** Messages waiting for it (or never read, once it ended). */
  readonly unreadMessages: number;
  /** From a start: whether this start made it (`false`: it existed with the same module,
   * entry point and input). Absent elsewhere. */
  readonly new?: boolean;
  /** Whether it ended: completed, failed or cancelled. */
  readonly ended: boolean;
  /** The server's JSON, as it came. */
  readonly raw: Record<string, any>;
}

/** One journaled step, as the server writes it (`wfhost history --json`). */
export interface Step {
  /** Its position, from 1. */
  step: number;
  /** When it ran, in milliseconds since the Unix epoch. */
  at: number;
  /** Milliseconds since the step before (null for the first). */
  after_ms?: number | null;
  /** The events it took, each with `kind` and `words`. */
  events: Array<Record<string, any>>;
  /** What it read (clocks, randomness), in words. */
  reads: string[];
  /** What it yielded, each with `tag`, `kind` and `words`. */
  yields: Array<Record<string, any>>;
  /** Its status after the step: `"continue"`, `"wait"`, `"idle"`, `{done}`, `{failed}` or
   * `{cancelled}`. */
  status: Json;
  /** The step exactly, in hex, for wfhost's own clients. */
  record: string;
}

/** Filters of a listing (and, but for `status` and `pageSize`, of counts). */
export interface ListFilters {
  /** Only workflows that stand so. */
  status?: WorkflowStatus;
  /** Only those of this entry point. */
  entry?: string;
  /** Only those whose id starts so. */
  prefix?: string;
  /** Only those no workflow spawned. */
  topLevel?: boolean;
  /** Only the children of the workflow with this number. */
  parent?: number;
  /** Only those started before this (a Date, or milliseconds since the epoch). */
  startedBefore?: Date | number;
  /** Only those started after this. */
  startedAfter?: Date | number;
  /** Workflows asked for per request (the server's default otherwise). */
  pageSize?: number;
}

/** Filters of `counts`. */
export type CountFilters = Omit<ListFilters, "status" | "pageSize">;

/** How many workflows stand each way. */
export interface Counts {
  running: number;
  paused: number;
  damaged: number;
  completed: number;
  failed: number;
  cancelled: number;
}

/** A message a workflow sent the host. */
export interface OutboxMessage {
  /** Its position among the workflow's messages to the host. */
  tag: number;
  /** When it was sent. */
  at: Date;
  /** What it holds. */
  data: Json;
  /** Its encoding, when it is not JSON. */
  dataEncoding?: string;
}

/** A page of a workflow's outbox. */
export interface OutboxPage {
  messages: OutboxMessage[];
  /** The cursor to ask for what follows (`after`); always given, as more may come. */
  next: string;
  /** Whether the workflow had finished when the page was read: nothing follows it. */
  finished: boolean;
}

/** What a cancel did. */
export interface CancelAnswer {
  /** `asked`, `asked_before`, or `ended` (it had finished: nothing to cancel). */
  cancel: "asked" | "asked_before" | "ended";
  status: WorkflowStatus;
}

/** What a pause or an unpause did. */
export interface PauseAnswer {
  /** `done`, `already` (it was so), or `ended` (it had finished). */
  pause: "done" | "already" | "ended";
  /** Whether it is paused now. */
  paused: boolean;
  status: WorkflowStatus;
}

/** What an upgrade did. */
export interface UpgradeAnswer {
  /** The module it ran. */
  from: string;
  /** The module it runs from now on. */
  to: string;
  /** Steps of its journal the new module replayed the same. */
  steps: number;
  /** It ran that module already: nothing changed. */
  already: boolean;
}

/** Options of a reset. */
export interface ResetOptions {
  /** The last step the new run keeps (0: none, it starts over); by default the step before
   * the one that ended the run (or took its cancel). */
  toStep?: number;
  /** A module to run in place of its own: a hash the store keeps, a name or `name@version`,
   * what `putModule` answered, or `.wasm` bytes (stored first). It must replay the steps
   * kept. */
  module?: string | ModuleInfo | Uint8Array;
}

/** What a reset did. */
export interface ResetAnswer {
  /** The workflow's id: the new run's. */
  id: string;
  /** The new run's number among the runs of its id. */
  run: number;
  /** The id the run before is kept under (`<id>/run-1`, ...). */
  previous: string;
  /** The steps the new run kept (replayed, not run again). */
  steps: number;
  /** The SHA-256 of the module the new run runs. */
  module: string;
  /** Messages the run before took after the steps kept, sent again to the new run. */
  messages: number;
}

/** A schedule to create. */
export interface ScheduleRequest {
  /** Its id; each firing starts workflow `<id>@<the firing's time>`. */
  id: string;
  /** A cron expression, seconds first (`0 *\/5 * * * *`: every five minutes). */
  cron?: string;
  /** Or an interval. */
  every?: Duration;
  /** The time zone `cron` is read in (an IANA name; default UTC). */
  timeZone?: string;
  /** The module of each firing: a hash, or what `putModule` answered. */
  module: string | ModuleInfo;
  /** The entry point each firing starts. */
  entry: string;
  /** The input of each firing (null when left out). */
  input?: Json;
  /** While the last firing's workflow runs: `skip` (default), `buffer-one`, `allow-all`. */
  overlap?: "skip" | "buffer-one" | "allow-all";
  /** Firings missed while no host ran: `skip` (default), `last`, `all:N`. */
  catchUp?: string;
  /** Each firing starts up to this much after its time. */
  jitter?: Duration;
}

/** A schedule: the server's `ScheduleJson` in camelCase. */
export class Schedule {
  private constructor();
  readonly id: string;
  /** When it fires, in words. */
  readonly when: string;
  readonly cron: string | null;
  readonly everyMs: number | null;
  readonly timeZone: string | null;
  readonly module: string;
  readonly entry: string;
  readonly input: Json;
  readonly overlap: string;
  readonly catchUp: string;
  readonly jitterMs: number;
  /** Paused: it does not fire until resumed. */
  readonly paused: boolean;
  /** Workflows it has started. */
  readonly fired: number;
  readonly created: Date;
  /** Its next firing, or null: never again. */
  readonly nextFire: Date | null;
  /** The workflow its last firing started. */
  readonly lastWorkflow: string | null;
  /** A firing waiting for that workflow to end, by its time. */
  readonly buffered: Date | null;
  /** The server's JSON, as it came. */
  readonly raw: Record<string, any>;
}

/** What a pause, resume or delete of a schedule did. */
export interface ScheduleChange {
  /** Whether it changed anything (`false`: it was so already). */
  changed: boolean;
}

/**
 * A client of one `wfhost serve --http` server. Every method is async; nothing is sent until
 * the first call. A call is asked again while the server restarts (within `retryFor`) when
 * that is safe: a refused connection or a 503 that did nothing for any call, a dropped
 * connection or another 503 for calls safe to repeat.
 */
export class Client {
  /**
   * @param url `http://host:port` or `https://host:port`; anything else throws `BadRequest`.
   * @param options the token, the timeout and the retry window.
   */
  constructor(url: string, options?: ClientOptions);
  /** The server's address, as given (without a trailing `/`). */
  readonly url: string;
  /** Stores a module (its `.wasm` bytes), under `options.name` too if given (`names` then
   * holds the version it has). Safe to repeat: a module is stored by its SHA-256, and the
   * same bytes under the same name store nothing new. */
  putModule(bytes: Uint8Array, options?: PutModuleOptions): Promise<PutModule>;
  /** The modules the store keeps, each with the names it was stored under. */
  modules(): Promise<ModuleInfo[]>;
  /**
   * Starts entry point `entry` of `module` (a hash, what `putModule` answered, a name it was
   * stored under: its latest version, or `name@version`; an unknown one throws `NotFound`,
   * code `unknown_module`) with `input` (null by default); started by a name, its
   * `moduleName` is the name. A start with an id that exists with the same module, entry and
   * input answers that workflow (`new` false); with another, it throws `Conflict` (code
   * `conflict`). With `wait`, also waits that long for it to end, and answers it as it stands
   * then (its `result` when it ended in time); without an id, such a start gets one made here
   * (`wf-` and a UUID), so that it is safe to ask again.
   */
  start(
    module: string | ModuleInfo,
    entry: string,
    input?: Json,
    options?: StartOptions,
  ): Promise<Workflow>;
  /**
   * Starts a workflow and waits up to `options.wait` (60 s) for it to end: its result.
   * @throws WorkflowFailed when it failed, WorkflowCancelled when it was cancelled,
   *   StillRunning when it had not ended in the wait.
   */
  execute<T = any>(
    module: string | ModuleInfo,
    entry: string,
    input?: Json,
    options?: StartOptions,
  ): Promise<T>;
  /**
   * Waits up to `wait` (30 s; 0: not at all) for workflow `id` to end: its result. A wait
   * longer than one request's 55 s is asked again until it is spent.
   * @throws WorkflowFailed, WorkflowCancelled, StillRunning as `execute` does; NotFound.
   */
  result<T = any>(id: string, options?: { wait?: Duration }): Promise<T>;
  /** Where workflow `id` stands. */
  status(id: string): Promise<Workflow>;
  /** Sends workflow `id` a message (any JSON): its number in the store. Not asked again after
   * an answer that may have been applied (a message may not be wanted twice). */
  send(id: string, message: Json): Promise<number>;
  /** Asks workflow `id` to cancel. */
  cancel(id: string): Promise<CancelAnswer>;
  /** Pauses workflow `id`: it takes no step until unpaused. */
  pause(id: string): Promise<PauseAnswer>;
  /** Unpauses workflow `id`: it takes what waited for it and goes on. */
  unpause(id: string): Promise<PauseAnswer>;
  /** Gives running workflow `id` a new module (a hash, a name or `name@version`, or what
   * `putModule` answered), if its journal replays the same with it; a 409 `Conflict` names
   * the step that differs otherwise. */
  upgrade(id: string, module: string | ModuleInfo): Promise<UpgradeAnswer>;
  /** Resets finished workflow `id`: a new run keeps its journal up to `toStep`, replays it and
   * goes on under the same id; the run before is kept as `<id>/run-<n>`. A 409 `Conflict` when
   * it has not finished, or the module does not replay the steps kept; a 400 `BadRequest` for
   * a child or a step past the last that may be kept. Not asked again after an answer that may
   * have been applied (it would find the new run running). */
  reset(id: string, options?: ResetOptions): Promise<ResetAnswer>;
  /** The runs of workflow `id`, first to last: those resets ended (`<id>/run-1`, ...), then
   * the one `id` names now. */
  runs(id: string): Promise<Workflow[]>;
  /** Every step of workflow `id`'s journal, a page (of `pageSize`) at a time. */
  history(id: string, options?: { pageSize?: number }): AsyncGenerator<Step, void, undefined>;
  /** Every workflow the filters let through, oldest first, a page at a time. */
  list(filters?: ListFilters): AsyncGenerator<Workflow, void, undefined>;
  /** How many workflows the filters let through stand each way. */
  counts(filters?: CountFilters): Promise<Counts>;
  /** The messages workflow `id` sent the host after cursor `after` (the `next` of the page
   * before); with `wait` (at most 55 s), waits for one when none is there yet. */
  outbox(
    id: string,
    options?: { after?: string; limit?: number; wait?: Duration },
  ): Promise<OutboxPage>;
  /** Creates a schedule. Not asked again after an answer that may have been lost (it would
   * find its own schedule: `Conflict`). */
  createSchedule(request: ScheduleRequest): Promise<Schedule>;
  /** Every schedule, by id. */
  schedules(): Promise<Schedule[]>;
  /** Schedule `id`. */
  schedule(id: string): Promise<Schedule>;
  /** Pauses schedule `id`: it does not fire until resumed. */
  pauseSchedule(id: string): Promise<ScheduleChange>;
  /** Resumes schedule `id` from its next time after now. */
  resumeSchedule(id: string): Promise<ScheduleChange>;
  /** Fires schedule `id` now: the workflow it started. Not asked again after an answer that
   * may have been applied (each firing is a workflow of its own). */
  triggerSchedule(id: string): Promise<Workflow>;
  /** Deletes schedule `id`; the workflows it started stay. */
  deleteSchedule(id: string): Promise<ScheduleChange>;
  /** Each worker function's workers and tasks (`GET /v1/workers`). */
  workers(): Promise<{ functions: FunctionWorkers[] }>;
  /** Whether the server is ready (`{status: "ok"}`); one that is not throws `Unavailable`
   * once `retryFor` is spent. */
  ready(): Promise<{ status: string }>;
}

/** One worker function's workers and tasks, as `GET /v1/workers` writes them. */
export interface FunctionWorkers {
  function: string;
  /** The workers that polled for it in the last hour, latest first. */
  pollers: { name: string; host: string; last_poll: string; last_poll_ms: number; polling: boolean }[];
  /** Tasks waiting for a worker, and how long the oldest has (milliseconds). */
  waiting: number;
  oldest_waiting_ms: number | null;
  /** Tasks workers hold now. */
  in_flight: number;
  /** Completions with a result, and with an error, this server took. */
  completed: number;
  failed: number;
}

/** Options of a `Worker`. */
export interface WorkerOptions {
  /** The server's token, or a worker token of the functions served. */
  token?: string;
  /** Tasks run at once (default 8). */
  concurrency?: number;
  /** How long one poll waits for a task (default 10 s; at most 55 s). */
  pollWait?: Duration;
  /** This worker's name, as `GET /v1/workers` shows it (default `HOST:PID`). */
  name?: string;
  /** How long a call may take in milliseconds, its waits excepted (default 30,000). */
  timeout?: number;
  /** How long a heartbeat, completion or release asks a restarting server again, in ms. */
  retryFor?: number;
  /** Called with what goes wrong (a poll that failed, a completion refused); by default
   * `console.warn`. `context` says what the worker was doing. */
  onError?: (error: Error, context: string) => void;
}

/** The task a function is called for. */
export interface Task {
  /** The delivery's name. */
  readonly id: string;
  /** The function called. */
  readonly function: string;
  /** The same for every attempt of this call: do the effect once per key. */
  readonly idempotencyKey: string | null;
  /** Which delivery of the call this is, from 1. */
  readonly attempt: number;
  /** The call's W3C trace context (`00-<trace id>-<span id>-<flags>`: the span of the
   * workflow's call) when the server is traced (`wfhost serve --otlp-endpoint`), else null.
   * Continue the trace: make your spans children of `task.traceparent`, e.g. with
   * OpenTelemetry's TraceContext propagator (`propagation.extract(ROOT_CONTEXT,
   * { traceparent: task.traceparent })`). */
  readonly traceparent: string | null;
  /** When the task goes to another worker unless heartbeaten; moved on by each heartbeat. */
  readonly deadline: Date;
  /** Aborted when the task moved on (another worker has it: this one's result would be
   * refused) or when the worker's stop grace ran out (the task was given back). Its reason is
   * an Error named `TaskMovedOn` or `WorkerStopped`. */
  readonly signal: AbortSignal;
}

/** A function a worker serves: what it returns (undefined: null) is the call's result. */
export type TaskFunction = (input: any, task: Task) => Json | void | Promise<Json | void>;

/** Thrown by a function: an error that trying again will not mend. The call fails for good,
 * whatever the workflow's retry policy, with the message alone; any other throw fails it with
 * `Name: message` and may be retried. */
export class Rejected extends Error {
  constructor(message?: string, options?: ErrorOptions);
}

/**
 * An activity worker: polls the server for the tasks of the functions registered with it, runs
 * up to `concurrency` at once, heartbeats each while it runs (every third of the time left to
 * its deadline, at least 1 s apart) and completes it with its function's outcome. A poll that
 * fails is reported (`onError`) and asked again, pausing up to 2 s, until the worker stops.
 */
export class Worker {
  /**
   * @param url the server's address (`http://host:port`).
   * @param options the token, the concurrency, the poll's wait, the reporter.
   */
  constructor(url: string, options?: WorkerOptions);
  /** This worker's name, as `GET /v1/workers` shows it (default `HOST:PID`). */
  readonly name: string;
  /** The functions served. */
  readonly functions: string[];
  /** Serves function `name` with `fn`; one registered before replaces it. Returns the worker. */
  register(name: string, fn: TaskFunction): this;
  /** Polls and runs tasks until `stop()`; resolves once `stop()` has finished. Rejects only
   * on a programming error: no function registered, or a worker that runs already. */
  run(): Promise<void>;
  /** Stops polling, waits up to `grace` (30 s) for the tasks running, then gives back those
   * unfinished (`release`: the next poll takes them now, their next attempt counted on) and
   * aborts their signals. Resolves when stopped. A task taken while stopping is given back
   * at once. */
  stop(options?: { grace?: Duration }): Promise<void>;
}

/** Every error this package throws. */
export class WfhostError extends Error {
  constructor(
    message: string,
    details?: { status?: number | null; code?: string; cause?: unknown },
  );
  /** The HTTP status of the server's refusal; null when no answer came or nothing was sent. */
  readonly status: number | null;
  /** A word programs can match: the server's (`unknown_workflow`, `conflict`,
   * `task_moved_on`, ...) or this client's (`refused`, `unreachable`, `timeout`,
   * `bad_request`, `bad_answer`, `http` for a refusal without the server's error body). */
  readonly code: string;
}
/** 400: the request was wrong (a parameter, the JSON, an id); or never sent (a bad URL, an id
 * that is `.` or `..`), with no status. */
export class BadRequest extends WfhostError {}
/** 401: no token, or not this server's. */
export class Unauthorized extends WfhostError {}
/** 403: a token that may not do this (a worker token of another function). */
export class Forbidden extends WfhostError {}
/** 404: no such workflow, module, schedule, task or route. */
export class NotFound extends WfhostError {}
/** 409: it exists otherwise (a start with another input), or it moved on (a task). */
export class Conflict extends WfhostError {}
/** 413: the body is larger than the server takes. */
export class TooLarge extends WfhostError {}
/** 429: too many at once (a workflow's unread messages). */
export class TooManyRequests extends WfhostError {}
/** 503: the server cannot now (starting, stopping, too busy). */
export class Unavailable extends WfhostError {}
/** Another 5xx: the server failed. */
export class ServerError extends WfhostError {}
/** No answer: nothing listened (code `refused`: nothing was sent) or the connection failed or
 * was dropped (code `unreachable`). */
export class Unreachable extends WfhostError {}
/** No answer within the client's timeout (code `timeout`). */
export class Timeout extends WfhostError {}
/** The workflow failed. */
export class WorkflowFailed extends WfhostError {
  constructor(workflow: Workflow);
  /** Its error's kind: `failed`, `trap`, `limit`, `nondeterminism`, ... */
  readonly kind: string;
  /** The workflow as it ended; `workflow.error.message` is what happened. */
  readonly workflow: Workflow;
}
/** The workflow was cancelled. */
export class WorkflowCancelled extends WfhostError {
  constructor(workflow: Workflow);
  /** Its error's kind (`cancelled`). */
  readonly kind: string;
  /** The workflow as it ended. */
  readonly workflow: Workflow;
}
/** The workflow had not ended when the wait was spent. */
export class StillRunning extends WfhostError {
  constructor(workflow: Workflow);
  /** The workflow as it stood then. */
  readonly workflow: Workflow;
}
