// The "wfhost" module: what a JavaScript workflow imports.
//
// An entry point is an exported `async function`; it takes the workflow's context and its input
// (a JSON value) and returns a JSON value. Every method of the context is a command the host
// carries out and journals, so a workflow that is stopped and started again replays to where it
// was:
//
//     import { HOST } from "wfhost";
//
//     export async function greet(ctx, name) {
//       await ctx.sleep(1500);
//       ctx.info(`greeting ${name}`);
//       return { hello: name };
//     }
//
// A command starts when its method is called and completes when awaited, so several run at
// once: `await Promise.all([ctx.call("a", 1), ctx.call("b", 2)])`. `ctx.select([...])` waits
// for the first of several and abandons the others (`Promise.race` would leave them running).

import * as native from "wfhost:native";

/** The pid of the host: `await ctx.send(HOST, value)` reaches the application that started the
 * workflow. */
export const HOST = 0;

/** Thrown at the await in progress when the workflow is cancelled. A workflow may catch it to
 * clean up (its commands still run) and should throw it again: one that lets it out ends as
 * cancelled. */
export class Cancelled extends Error {
  constructor(message = "the workflow was cancelled") {
    super(message);
    this.name = "Cancelled";
  }
}

/** A command the host could not carry out: `kind` names why (`child-failed`, `timeout`,
 * `no-such-process`, `function-failed`, ...), `reason` says what. */
export class CommandError extends Error {
  constructor(kind, reason) {
    super(`${kind}: ${reason}`);
    this.name = "CommandError";
    this.kind = kind;
    this.reason = reason;
  }
}

function milliseconds(value, what) {
  if (typeof value !== "number" || !(value >= 0) || value === Infinity) {
    throw new TypeError(`${what} is a number of milliseconds, 0 or more; ${String(value)} is not one`);
  }
  return value;
}

function pid(value, what) {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new TypeError(`${what} is a pid (a whole number, 0 or more); ${String(value)} is not one`);
  }
  return value;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function bytes(body) {
  if (body === undefined || body === null) return new Uint8Array(0);
  if (typeof body === "string") return encoder.encode(body);
  if (body instanceof Uint8Array) return body;
  if (body instanceof ArrayBuffer) return new Uint8Array(body);
  if (ArrayBuffer.isView(body)) return new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
  throw new TypeError("an HTTP body is a string, a Uint8Array or an ArrayBuffer");
}

/** What `ctx.http` answers: the status, the headers as `[name, value]` pairs (a name may come
 * twice), the body's bytes, and the body read as text or JSON. */
class HttpResponse {
  constructor(status, headers, body) {
    this.status = status;
    this.headers = headers;
    this.body = body;
  }

  /** Whether the status is 2xx. */
  get ok() {
    return this.status >= 200 && this.status < 300;
  }

  /** The first value of header `name` (any case), or `null`. */
  header(name) {
    const lower = String(name).toLowerCase();
    const found = this.headers.find(([n]) => n.toLowerCase() === lower);
    return found === undefined ? null : found[1];
  }

  /** The body as UTF-8 text. */
  text() {
    return decoder.decode(this.body);
  }

  /** The body as JSON. */
  json() {
    return JSON.parse(this.text());
  }
}

/** A workflow's handle on its host. */
export class Context {
  constructor(pid, parent, entry) {
    /** This workflow's pid. */
    this.pid = pid;
    /** The pid of the workflow that spawned it, or `null`. */
    this.parent = parent;
    /** The entry point it runs. */
    this.entry = entry;
    Object.freeze(this);
  }

  /** Completes after `ms` milliseconds of the host's time. */
  sleep(ms) {
    return native.sleep(milliseconds(ms, "a sleep"));
  }

  /** The time the current step began, in milliseconds since the Unix epoch: what `Date.now()`
   * gives during the step (the host's clock, read once a step and journaled). */
  now() {
    return native.now();
  }

  /** A number in [0, 1), journaled. */
  random() {
    return native.random();
  }

  /** Logs `text` at the host. */
  info(text) {
    native.log("info", String(text));
  }

  /** Logs `text` as a warning at the host. */
  warn(text) {
    native.log("warn", String(text));
  }

  /** Sends `value` (JSON) to workflow `to` (`HOST`: the host). */
  send(to, value) {
    return native.send(pid(to, "a message's receiver"), value);
  }

  /** The next message; with `{ timeout }` (milliseconds), `undefined` if none comes in time. */
  recv(options = {}) {
    const timeout = options?.timeout;
    return native.recv(timeout === undefined ? undefined : milliseconds(timeout, "a timeout"));
  }

  /** Starts entry point `entry` of this module as a child: its pid. */
  spawn(entry, input = null) {
    return native.spawn(String(entry), input);
  }

  /** The result of child `child` once it ends; a child that failed or was cancelled throws a
   * `CommandError` (`child-failed`, `child-cancelled`). */
  join(child) {
    return native.join(pid(child, "a child"));
  }

  /** Asks child `child` to stop. */
  cancel(child) {
    return native.cancel(pid(child, "a child"));
  }

  /** Calls host or worker function `name` with `input` (JSON): its answer. */
  call(name, input = null) {
    return native.call(String(name), input);
  }

  /** An outbound HTTP request (the host allows only what its allowlist says), in `fetch`'s
   * shape: `await ctx.http(url, { method, headers, body, timeout })`. `headers` is an object or
   * a list of `[name, value]` pairs (for a name given twice); `body` a string (sent as UTF-8), a
   * Uint8Array or an ArrayBuffer; `timeout` milliseconds. */
  async http(url, { method = "GET", headers = [], body, timeout } = {}) {
    const pairs = (Array.isArray(headers) ? headers : Object.entries(headers)).map(([name, value]) => [
      String(name),
      String(value),
    ]);
    const head = {
      method: String(method),
      url: String(url),
      headers: pairs,
      timeout: timeout === undefined ? null : milliseconds(timeout, "a timeout"),
    };
    const [status, answered, answer] = await native.http(head, bytes(body));
    return new HttpResponse(status, answered, answer);
  }

  /** The first of `commands` (what the context's methods return, not yet settled) to
   * complete: `[index, value]`, or its error. The others are abandoned: a `recv` leaves its
   * message for the next one, a `sleep`'s timer is dropped. (`Promise.race` leaves the losers
   * running: a `recv` that lost one still takes the next message.) */
  select(commands) {
    return native.select(...commands);
  }

  /** Whether the code after patch `changeId` runs (see `wfhost upgrade`). */
  patched(changeId) {
    return native.patched(String(changeId));
  }
}
Object.freeze(Context.prototype);
