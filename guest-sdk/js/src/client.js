// `Client`: the HTTP API of a `wfhost serve --http` server, one method per route, all async.
// What the server answers in snake_case is given back in camelCase objects (`Workflow`,
// `Schedule`), with times as `Date`s and the server's JSON kept as `raw`.
import { randomUUID } from "node:crypto";

import { StillRunning, WorkflowCancelled, WorkflowFailed } from "./errors.js";
import { Transport, duration, query, segment } from "./http.js";

/** The longest wait one request asks for: below every server's cap and undici's own timeout
 * (300 s); a longer wait asks again until it is spent. */
const MAX_WAIT = 55_000;

/** The statuses of a workflow that ended. */
const ENDED = new Set(["completed", "failed", "cancelled"]);

/** Where a workflow stands, from the server's JSON. */
export class Workflow {
  /**
   * @param {any} json a `WorkflowJson` as the server writes it
   * @param {boolean} [isNew] whether the start that answered it made it
   */
  constructor(json, isNew) {
    this.id = json.id;
    this.status = json.status;
    this.entry = json.entry;
    this.module = json.module;
    this.moduleName = json.module_name;
    this.number = json.number;
    this.parent = json.parent ?? null;
    this.started = new Date(json.started);
    this.finished = json.finished == null ? null : new Date(json.finished);
    this.steps = json.steps;
    this.host = json.host ?? null;
    this.waitingForHost = json.waiting_for_host;
    this.input = json.input;
    this.inputEncoding = json.input_encoding ?? null;
    this.result = json.result === undefined ? null : json.result;
    this.resultEncoding = json.result_encoding ?? null;
    this.error = json.error ?? null;
    this.damaged = json.damaged ?? null;
    this.paused = json.paused ?? false;
    this.run = json.run ?? 1;
    this.cancelAsked = json.cancel_asked;
    this.unreadMessages = json.unread_messages;
    if (isNew !== undefined) this.new = isNew;
    this.raw = json;
  }

  /** Whether it ended: completed, failed or cancelled. */
  get ended() {
    return ENDED.has(this.status);
  }
}

/** A schedule, from the server's JSON. */
export class Schedule {
  /** @param {any} json a `ScheduleJson` as the server writes it */
  constructor(json) {
    this.id = json.id;
    this.when = json.when;
    this.cron = json.cron ?? null;
    this.everyMs = json.every_ms ?? null;
    this.timeZone = json.time_zone ?? null;
    this.module = json.module;
    this.entry = json.entry;
    this.input = json.input;
    this.overlap = json.overlap;
    this.catchUp = json.catch_up;
    this.jitterMs = json.jitter_ms;
    this.paused = json.paused;
    this.fired = json.fired;
    this.created = new Date(json.created);
    this.nextFire = json.next_fire == null ? null : new Date(json.next_fire);
    this.lastWorkflow = json.last_workflow ?? null;
    this.buffered = json.buffered == null ? null : new Date(json.buffered);
    this.raw = json;
  }
}

/** The result of a workflow that ended, or the error that says how else it stands. */
function outcome(workflow) {
  switch (workflow.status) {
    case "completed":
      return workflow.result;
    case "failed":
      throw new WorkflowFailed(workflow);
    case "cancelled":
      throw new WorkflowCancelled(workflow);
    default:
      throw new StillRunning(workflow);
  }
}

/** How a request names a module: the string given (a hash, a name or `name@version`), or the
 * hash of what `putModule` answered. */
function hashOf(module) {
  return typeof module === "string" ? module : module?.hash;
}

/** A time filter as milliseconds since the epoch. */
function millis(time) {
  return time instanceof Date ? time.getTime() : time;
}

/** A client of one `wfhost serve --http` server. Nothing is sent until the first call. */
export class Client {
  #http;

  /**
   * @param {string} url `http://host:port` or `https://host:port`
   * @param {{token?: string, timeout?: number, retryFor?: number, traceparent?: string}} [options]
   *   times in ms; `traceparent`: a W3C trace context sent with every call (a traced server's
   *   spans, and the workflows started, become children of it)
   */
  constructor(url, { token, timeout = 30_000, retryFor = 30_000, traceparent } = {}) {
    this.#http = new Transport(url, { token, timeout, retryFor, traceparent });
  }

  /** The server's address, as given (without a trailing `/`). */
  get url() {
    return this.#http.base;
  }

  /** Stores a module (its `.wasm` bytes): `{hash, entryPoints, size, names, new}`, `new` false
   * when the store had it. With `name`, under that name too: it takes the name's next version
   * (unless it is the name's latest already), which `names` holds (`[{name, version}]`), and a
   * start may name it by the name (its latest version) or `name@version`. Safe to repeat: a
   * module is stored by its SHA-256, and the same bytes under the same name store nothing new. */
  async putModule(bytes, { name } = {}) {
    const { status, body } = await this.#http.request("POST", `/v1/modules${query({ name })}`, {
      bytes,
      safe: true,
    });
    return moduleOf(body, status === 201);
  }

  /** The modules the store keeps: `[{hash, entryPoints, size, names}]`, `names` the names
   * (`{name, version}`) each was stored under. */
  async modules() {
    const { body } = await this.#http.request("GET", "/v1/modules");
    return body.modules.map((module) => moduleOf(module));
  }

  /** Starts entry point `entry` of `module` (a hash, what `putModule` answered, a name it was
   * stored under: its latest version, or `name@version`; an unknown one is a 404 `NotFound`)
   * with `input`: the workflow, with `new` false when it existed with the same module, entry
   * and input (a start with an id is safe to repeat; another input is a 409 `Conflict`).
   * Started by a name, the workflow's `moduleName` is the name. With `wait` (seconds, or
   * `"30s"`), waits that long for it to end, in as few requests as the server allows; it is
   * answered as it stands then. With `traceparent` (in place of the client's), the workflow
   * joins that W3C trace context on a traced server, as a child of the request's span. */
  async start(module, entry, input = null, { id, wait, traceparent } = {}) {
    const request = { module: hashOf(module), entry, input };
    if (id !== undefined && id !== null) request.id = id;
    if (wait === undefined || wait === null) {
      const { body } = await this.#http.request("POST", "/v1/workflows", {
        json: request,
        safe: request.id !== undefined,
        traceparent,
      });
      return new Workflow(body.workflow, body.new);
    }
    const total = duration(wait).ms;
    const deadline = Date.now() + total;
    const started = await this.#startAndWait(request, total, traceparent);
    if (started.ended || Date.now() >= deadline) return started;
    const ended = await this.#awaitEnd(started.id, deadline - Date.now());
    return new Workflow(ended.raw, started.new);
  }

  /** Starts a workflow and waits up to `wait` (60 s) for it to end: its result. A failed one
   * throws `WorkflowFailed`, a cancelled one `WorkflowCancelled`, one still running
   * `StillRunning`. `traceparent` as `start` takes it. */
  async execute(module, entry, input = null, { id, wait = 60, traceparent } = {}) {
    const request = { module: hashOf(module), entry, input };
    if (id !== undefined && id !== null) request.id = id;
    const total = duration(wait).ms;
    const deadline = Date.now() + total;
    let workflow = await this.#startAndWait(request, total, traceparent);
    if (!workflow.ended && Date.now() < deadline) {
      workflow = await this.#awaitEnd(workflow.id, deadline - Date.now());
    }
    return outcome(workflow);
  }

  /** Waits up to `wait` (30 s; 0: not at all) for workflow `id` to end: its result, or the
   * errors `execute` throws. A wait past 55 s is asked in several requests. */
  async result(id, { wait = 30 } = {}) {
    return outcome(await this.#awaitEnd(id, duration(wait).ms));
  }

  /** Where workflow `id` stands. */
  async status(id) {
    const { body } = await this.#http.request("GET", `/v1/workflows/${segment(id)}`);
    return new Workflow(body);
  }

  /** Sends workflow `id` the JSON `message`: its number in the store. Never sent twice (a
   * message may not be wanted twice), except after a refused connection. */
  async send(id, message) {
    const { body } = await this.#http.request("POST", `/v1/workflows/${segment(id)}/messages`, {
      json: message === undefined ? null : message,
      safe: false,
    });
    return body.message;
  }

  /** Asks workflow `id` to cancel: `{cancel: "asked"|"asked_before"|"ended", status}`. */
  async cancel(id) {
    return this.#change(`/v1/workflows/${segment(id)}/cancel`);
  }

  /** Pauses workflow `id`: `{pause: "done"|"already"|"ended", paused, status}`. */
  async pause(id) {
    return this.#change(`/v1/workflows/${segment(id)}/pause`);
  }

  /** Unpauses workflow `id`: as `pause` answers. */
  async unpause(id) {
    return this.#change(`/v1/workflows/${segment(id)}/unpause`);
  }

  /** Gives running workflow `id` module `module` (a hash, a name or `name@version`, or what
   * `putModule` answered) if its journal replays the same with it:
   * `{from, to, steps, already}`; a 409 `Conflict` names the step that differs. */
  async upgrade(id, module) {
    const { body } = await this.#http.request("POST", `/v1/workflows/${segment(id)}/upgrade`, {
      json: { module: hashOf(module) },
      safe: true,
    });
    return body;
  }

  /** Resets finished workflow `id`: a new run keeps its journal up to step `toStep` (by
   * default the step before the one that ended it), replays it and goes on under the same id,
   * with `module` (a hash, a name or `name@version`, what `putModule` answered, or `.wasm`
   * bytes, stored first) in place of its own if given: `{id, run, previous, steps, module,
   * messages}`, the run before kept as `previous` (`<id>/run-1`, ...). A 409 `Conflict` when
   * it has not finished or the module does not replay the steps kept. Never sent twice (it
   * would find the new run running). */
  async reset(id, { toStep, module } = {}) {
    const request = {};
    if (toStep !== undefined && toStep !== null) request.to_step = toStep;
    if (module instanceof Uint8Array) module = await this.putModule(module);
    if (module !== undefined && module !== null) request.module = hashOf(module);
    const { body } = await this.#http.request("POST", `/v1/workflows/${segment(id)}/reset`, {
      json: request,
      safe: false,
    });
    return body;
  }

  /** The runs of workflow `id`, first to last: those resets ended (`<id>/run-1`, ...), then
   * the one `id` names now. */
  async runs(id) {
    const { body } = await this.#http.request("GET", `/v1/workflows/${segment(id)}/runs`);
    return body.runs.map((workflow) => new Workflow(workflow));
  }

  /** The steps of workflow `id`'s journal, as the server writes them, a page at a time. */
  async *history(id, { pageSize } = {}) {
    let after = null;
    do {
      const params = query({ after, limit: pageSize });
      const path = `/v1/workflows/${segment(id)}/history${params}`;
      const { body } = await this.#http.request("GET", path);
      yield* body.steps;
      after = body.next ?? null;
    } while (after !== null);
  }

  /** The store's workflows that the filters let through, oldest first, a page at a time. */
  async *list({
    status,
    entry,
    prefix,
    topLevel,
    parent,
    startedBefore,
    startedAfter,
    pageSize,
  } = {}) {
    let after = null;
    do {
      const params = query({
        status,
        entry,
        prefix,
        top_level: topLevel,
        parent,
        started_before: millis(startedBefore),
        started_after: millis(startedAfter),
        limit: pageSize,
        after,
      });
      const { body } = await this.#http.request("GET", `/v1/workflows${params}`);
      for (const workflow of body.workflows) yield new Workflow(workflow);
      after = body.next ?? null;
    } while (after !== null);
  }

  /** How many workflows stand each way: `{running, paused, damaged, completed, failed,
   * cancelled}`. */
  async counts({ entry, prefix, topLevel, parent, startedBefore, startedAfter } = {}) {
    const params = query({
      entry,
      prefix,
      top_level: topLevel,
      parent,
      started_before: millis(startedBefore),
      started_after: millis(startedAfter),
    });
    const { body } = await this.#http.request("GET", `/v1/workflow-counts${params}`);
    return { paused: 0, damaged: 0, ...body };
  }

  /** The messages workflow `id` sent the host after cursor `after`: `{messages, next,
   * finished}`. With `wait`, waits (at most 55 s) for one when none is there yet. */
  async outbox(id, { after, limit, wait } = {}) {
    const ms = wait === undefined || wait === null ? 0 : Math.min(duration(wait).ms, MAX_WAIT);
    const params = query({ after, limit, wait: ms ? `${ms}ms` : undefined });
    const path = `/v1/workflows/${segment(id)}/outbox${params}`;
    const { body } = await this.#http.request("GET", path, { wait: ms });
    return {
      messages: body.messages.map((m) => ({
        tag: m.tag,
        at: new Date(m.at),
        data: m.data,
        ...(m.data_encoding ? { dataEncoding: m.data_encoding } : {}),
      })),
      next: body.next,
      finished: body.finished,
    };
  }

  /** Creates a schedule: `cron` (seconds first) or `every`, and the module, entry and input of
   * each firing. Safe to repeat. */
  async createSchedule({
    id,
    cron,
    every,
    timeZone,
    module,
    entry,
    input = null,
    overlap,
    catchUp,
    jitter,
  }) {
    const request = { id, module: hashOf(module), entry, input };
    if (cron !== undefined) request.cron = cron;
    if (every !== undefined) request.every = duration(every).text;
    if (timeZone !== undefined) request.time_zone = timeZone;
    if (overlap !== undefined) request.overlap = overlap;
    if (catchUp !== undefined) request.catch_up = catchUp;
    if (jitter !== undefined) request.jitter = duration(jitter).text;
    // Not sent again after a lost answer: it would find its own schedule (a 409).
    const { body } = await this.#http.request("POST", "/v1/schedules", {
      json: request,
      safe: false,
    });
    return new Schedule(body);
  }

  /** Every schedule. */
  async schedules() {
    const { body } = await this.#http.request("GET", "/v1/schedules");
    return body.schedules.map((schedule) => new Schedule(schedule));
  }

  /** Schedule `id`. */
  async schedule(id) {
    const { body } = await this.#http.request("GET", `/v1/schedules/${segment(id)}`);
    return new Schedule(body);
  }

  /** Pauses schedule `id`: `{changed}`. */
  async pauseSchedule(id) {
    return this.#change(`/v1/schedules/${segment(id)}/pause`);
  }

  /** Resumes schedule `id` from its next time after now: `{changed}`. */
  async resumeSchedule(id) {
    return this.#change(`/v1/schedules/${segment(id)}/resume`);
  }

  /** Fires schedule `id` now: the workflow it started. Never sent twice. */
  async triggerSchedule(id) {
    const { body } = await this.#http.request("POST", `/v1/schedules/${segment(id)}/trigger`, {
      safe: false,
    });
    return new Workflow(body.workflow, body.new);
  }

  /** Deletes schedule `id` (its workflows stay): `{changed}`. */
  async deleteSchedule(id) {
    const { body } = await this.#http.request("DELETE", `/v1/schedules/${segment(id)}`);
    return body;
  }

  /** For each worker function: the workers polling for it (`{name, host, last_poll_ms,
   * polling}`), the tasks waiting (`waiting`, `oldest_waiting_ms`), in flight, completed and
   * failed, as the server's JSON writes them (`GET /v1/workers`). */
  async workers() {
    const { body } = await this.#http.request("GET", "/v1/workers");
    return body;
  }

  /** Whether the server is ready: `{status: "ok"}`; a server that is not is `Unavailable`
   * (asked again within `retryFor`). */
  async ready() {
    const { body } = await this.#http.request("GET", "/readyz");
    return body;
  }

  /** A POST without a body, of a route safe to repeat: its answer as the server wrote it. */
  async #change(path) {
    const { body } = await this.#http.request("POST", path, { safe: true });
    return body;
  }

  /** Starts `request` and waits up to `ms` (at most one request's wait) for it to end. A
   * request without an id gets one here: a wait a restart cut short is then safe to ask again,
   * and the caller always has the workflow's id. */
  async #startAndWait(request, ms, traceparent) {
    if (request.id === undefined) request.id = `wf-${randomUUID()}`;
    const wait = Math.min(ms, MAX_WAIT);
    const { body } = await this.#http.request("POST", `/v1/workflows?wait=${wait}ms`, {
      json: request,
      wait,
      safe: true,
      traceparent,
    });
    return new Workflow(body.workflow, body.new);
  }

  /** Workflow `id` once it ends, or as it stands when `ms` is spent: one request per 55 s. */
  async #awaitEnd(id, ms) {
    const deadline = Date.now() + ms;
    for (;;) {
      const wait = Math.max(0, Math.min(deadline - Date.now(), MAX_WAIT));
      const path = `/v1/workflows/${segment(id)}/result${wait ? `?wait=${wait}ms` : ""}`;
      const { status, body } = await this.#http.request("GET", path, { wait });
      const workflow = new Workflow(body);
      if (status !== 202 || workflow.ended || Date.now() >= deadline) return workflow;
    }
  }
}

/** A module's JSON in camelCase, with whether the call that answered it stored it. */
function moduleOf(json, isNew) {
  const module = {
    hash: json.hash,
    entryPoints: json.entry_points,
    size: json.size,
    names: (json.names ?? []).map(({ name, version }) => ({ name, version })),
  };
  if (isNew !== undefined) module.new = isNew;
  return module;
}
