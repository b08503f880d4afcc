// `Worker`: an activity worker. It polls the server for the tasks of the functions registered
// with it, runs each (up to `concurrency` at once), heartbeats it while it runs, and completes
// it with what the function returned or threw.
//
// One poller takes the tasks, and polls only while a slot is free: a worker never holds a task
// it has no room to run. A poll that fails (the server restarting, a network error, even a
// refusal) is reported and asked again after a pause of 100 ms doubling up to 2 s, until the
// worker stops: a worker outlives its server's restarts.
//
// `stop()` stops polling (an in-flight poll is abandoned; the server forgets a poller whose
// connection closed), waits up to its grace for the tasks running, and then gives back the
// unfinished ones (`release`) so that another worker takes them now rather than at their
// deadlines. Their functions' signals are aborted; what they return afterwards is dropped.
import { hostname } from "node:os";

import { Transport, duration, segment, sleep } from "./http.js";

/** Thrown by a function: an error that trying again will not mend (a declined card). The call
 * fails for good, whatever the workflow's retry policy; any other throw may be retried. */
export class Rejected extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = "Rejected";
  }
}

/** The longest wait of one poll (a longer `pollWait` is cut to it): below undici's 300 s. */
const MAX_POLL_WAIT = 55_000;

/** Pauses after failed polls: 100 ms doubling up to 2 s. */
const FIRST_PAUSE = 100;
const LONGEST_PAUSE = 2_000;

/** The shortest time between two heartbeats of a task. */
const MIN_HEARTBEAT = 1_000;
/** The longest time between two heartbeats of one task. */
const MAX_HEARTBEAT = 20_000;

/** Why a task's signal was aborted. */
class TaskMovedOn extends Error {
  name = "TaskMovedOn";
}
class WorkerStopped extends Error {
  name = "WorkerStopped";
}

/** A worker serving the functions registered with it from one server's tasks. */
export class Worker {
  #http;
  #functions = new Map();
  #concurrency;
  #pollWait;
  #onError;
  /** The tasks running, by the task's name. */
  #running = new Map();
  #stopping = false;
  /** Aborts the poll in flight, and the pause after a failed one, when the worker stops. */
  #stopPolling = null;
  /** Resolves when a slot frees or the worker stops, for a poller waiting for room. */
  #wake = null;
  /** The run in progress: its poll loop, and what resolves it once stopped. */
  #run = null;

  /**
   * @param {string} url the server's address
   * @param {object} [options]
   * @param {string} [options.token] the server's token, or a worker token of these functions
   * @param {number} [options.concurrency] tasks run at once (8)
   * @param {number|string} [options.pollWait] how long one poll waits for a task (10 s)
   * @param {string} [options.name] this worker's name in what it reports
   * @param {number} [options.timeout] how long a call may take, in ms (30 s)
   * @param {number} [options.retryFor] how long a call asks a restarting server again, in ms
   * @param {(error: Error, context: string) => void} [options.onError] what it reports with
   */
  constructor(
    url,
    { token, concurrency = 8, pollWait = 10, name, timeout, retryFor, onError } = {},
  ) {
    if (!Number.isInteger(concurrency) || concurrency < 1) {
      throw new RangeError(`concurrency is a whole number of at least 1, not ${concurrency}`);
    }
    this.#http = new Transport(url, { token, timeout, retryFor });
    this.#concurrency = concurrency;
    this.#pollWait = Math.min(duration(pollWait).ms, MAX_POLL_WAIT);
    this.name = name ?? `${hostname()}:${process.pid}`;
    this.#onError =
      onError ??
      ((error, context) => console.warn(`wfhost ${this.name}: ${context}: ${error.message}`));
  }

  /** The functions served, by name. */
  get functions() {
    return [...this.#functions.keys()];
  }

  /** Serves function `name` with `fn(input, task)`: what it returns (undefined: null) is the
   * result; a `Rejected` it throws fails the call for good, any other throw retryably. `task`
   * is `{id, function, idempotencyKey, attempt, traceparent, deadline, signal}`: `traceparent`
   * the call's W3C trace context on a traced server (else null), for the function's spans to
   * continue. */
  register(name, fn) {
    if (typeof name !== "string" || name === "")
      throw new TypeError("a function's name is a string");
    if (typeof fn !== "function") throw new TypeError(`'${name}' must be given a function`);
    this.#functions.set(name, fn);
    return this;
  }

  /** Polls and runs tasks until `stop()`; resolves once `stop()` has finished. Rejects only
   * when no function was registered (or the worker runs already): a server that cannot be
   * reached is reported and asked again. */
  async run() {
    if (this.#functions.size === 0) {
      throw new Error("no functions registered: call worker.register(name, fn) before run()");
    }
    if (this.#run) throw new Error("this worker runs already");
    this.#stopping = false;
    this.#stopPolling = new AbortController();
    let done;
    const stopped = new Promise((resolve) => (done = resolve));
    this.#run = { loop: this.#poll(), stopped, done };
    try {
      await this.#run.loop;
      // Polling ends only when stop() asked; run() resolves once stop() has finished.
      await stopped;
    } finally {
      this.#run = null;
    }
  }

  /** Stops polling, waits up to `grace` (seconds, or a duration string) for the tasks
   * running, then gives back those unfinished (their signals aborted): resolves when stopped. */
  async stop({ grace = 30 } = {}) {
    const run = this.#run;
    if (!run) return;
    if (this.#stopping) return run.stopped;
    this.#stopping = true;
    this.#stopPolling.abort(new WorkerStopped("the worker is stopping"));
    this.#wakeUp();
    // The poll loop ends at once: its poll is abandoned, and a task it had just taken is
    // given back before it ends.
    await run.loop;
    const graceMs = duration(grace).ms;
    const finished = Promise.all([...this.#running.values()].map((task) => task.settled));
    let timer;
    const ranOut = new Promise((resolve) => (timer = setTimeout(resolve, graceMs, "ran-out")));
    const outcome = await Promise.race([finished, ranOut]);
    clearTimeout(timer);
    if (outcome === "ran-out") {
      await Promise.all([...this.#running.values()].map((task) => this.#giveBack(task)));
    }
    run.done();
    return run.stopped;
  }

  /** Takes tasks while the worker runs and a slot is free. */
  async #poll() {
    let pause = FIRST_PAUSE;
    while (!this.#stopping) {
      if (this.#running.size >= this.#concurrency) {
        await new Promise((resolve) => (this.#wake = resolve));
        continue;
      }
      let answer;
      try {
        answer = await this.#http.request("POST", "/v1/tasks/poll", {
          json: { functions: this.functions, wait: `${this.#pollWait}ms`, worker: this.name, host: hostname() },
          wait: this.#pollWait,
          safe: false,
          signal: this.#stopPolling.signal,
          // Asked again here, after reporting it, rather than silently in the transport.
          retryFor: 0,
        });
      } catch (error) {
        if (this.#stopping) break;
        this.#onError(error, "cannot take a task");
        await sleep(pause, this.#stopPolling.signal).catch(() => {});
        pause = Math.min(pause * 2, LONGEST_PAUSE);
        continue;
      }
      pause = FIRST_PAUSE;
      if (answer.status !== 200 || !answer.body) continue;
      const task = this.#start(answer.body);
      if (this.#stopping) await this.#giveBack(task);
    }
  }

  /** Starts running `json`, a task the server gave: the task as the worker tracks it. */
  #start(json) {
    const controller = new AbortController();
    // What the function gets: `traceparent` is the call's W3C trace context (the span of the
    // workflow's call) when the server is traced (`--otlp-endpoint`), else null. Continue the
    // trace: make your spans children of task.traceparent, e.g. with OpenTelemetry's
    // TraceContext propagator.
    const task = {
      id: json.task,
      function: json.function,
      idempotencyKey: json.idempotency_key ?? null,
      attempt: json.attempt,
      traceparent: json.traceparent ?? null,
      deadline: new Date(json.deadline_ms),
      signal: controller.signal,
    };
    const tracked = {
      task,
      json,
      controller,
      released: false,
      heartbeat: null,
      settled: null,
      lease: json.lease_ms,
    };
    this.#running.set(task.id, tracked);
    if (this.#stopping) {
      tracked.settled = Promise.resolve();
      return tracked;
    }
    this.#scheduleHeartbeat(tracked);
    tracked.settled = this.#execute(tracked).finally(() => {
      clearTimeout(tracked.heartbeat);
      this.#running.delete(task.id);
      this.#wakeUp();
    });
    return tracked;
  }

  /** Runs the task's function and completes the task with its outcome. */
  async #execute(tracked) {
    const { task, json } = tracked;
    const fn = this.#functions.get(task.function);
    let completion;
    try {
      if (!fn) throw new Rejected(`this worker does not serve '${task.function}'`);
      const result = await fn(json.input, task);
      completion = { result: toJson(result) };
    } catch (error) {
      completion = { error: errorOf(error) };
    }
    if (tracked.released || task.signal.aborted) return;
    await this.#complete(tracked, completion);
  }

  /** Sends the completion, asking again while no answer comes and the deadline is not past
   * (as `wfhost worker` does): a completion the server applied twice is refused the second
   * time, never applied twice. */
  async #complete(tracked, completion) {
    const { task } = tracked;
    let resent = false;
    for (;;) {
      try {
        await this.#http.request("POST", `/v1/tasks/${segment(task.id)}/complete`, {
          json: completion,
          safe: false,
        });
        return;
      } catch (error) {
        // A 409 after a completion whose answer was lost: most likely that one was applied.
        if (resent && error.status === 409) return;
        if (error.status != null || Date.now() >= task.deadline.getTime() || tracked.released) {
          this.#onError(error, `task ${task.id} not completed`);
          return;
        }
        resent = true;
        await sleep(500);
      }
    }
  }

  /** Heartbeats the task a third of its lease after the last time (1 s to 20 s apart). The
   * lease is the server's (`lease_ms`, by its own clock: this machine's may differ). */
  #scheduleHeartbeat(tracked) {
    const lease = tracked.lease ?? tracked.task.deadline.getTime() - Date.now();
    const every = Math.min(Math.max(Math.floor(lease / 3), MIN_HEARTBEAT), MAX_HEARTBEAT);
    tracked.heartbeat = setTimeout(() => this.#heartbeat(tracked), every);
  }

  async #heartbeat(tracked) {
    const { task, controller } = tracked;
    if (tracked.released || controller.signal.aborted || !this.#running.has(task.id)) return;
    try {
      const { body } = await this.#http.request("POST", `/v1/tasks/${segment(task.id)}/heartbeat`, {
        safe: true,
      });
      task.deadline = new Date(body.deadline_ms);
      tracked.lease = body.lease_ms;
    } catch (error) {
      if (error.status === 409 || error.status === 404) {
        // Another worker has it, or it is done with: this one's completion would be refused.
        controller.abort(new TaskMovedOn(`task ${task.id} moved on: ${error.message}`));
        return;
      }
      this.#onError(error, `cannot heartbeat task ${task.id}`);
    }
    if (!tracked.released && !controller.signal.aborted && this.#running.has(task.id)) {
      this.#scheduleHeartbeat(tracked);
    }
  }

  /** Gives an unfinished task back to the server, for the next poll to take now. */
  async #giveBack(tracked) {
    if (tracked.released) return;
    tracked.released = true;
    clearTimeout(tracked.heartbeat);
    tracked.controller.abort(new WorkerStopped("the worker stopped before the task finished"));
    this.#running.delete(tracked.task.id);
    try {
      await this.#http.request("POST", `/v1/tasks/${segment(tracked.task.id)}/release`, {
        safe: true,
      });
    } catch (error) {
      // A task not given back goes to another worker at its deadline.
      this.#onError(error, `cannot give task ${tracked.task.id} back`);
    }
  }

  #wakeUp() {
    const wake = this.#wake;
    this.#wake = null;
    wake?.();
  }
}

/** A function's return value as a result: undefined is null; what JSON cannot write fails. */
function toJson(value) {
  if (value === undefined) return null;
  try {
    JSON.stringify(value);
  } catch (error) {
    throw new Rejected(`the function's result is not JSON: ${error.message}`);
  }
  return value;
}

/** A function's throw as a task's error. */
function errorOf(error) {
  if (error instanceof Rejected) return { message: error.message, retryable: false };
  if (error instanceof Error)
    return { message: `${error.name}: ${error.message}`, retryable: true };
  return { message: String(error), retryable: true };
}
