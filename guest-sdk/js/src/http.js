// The transport: one call to the server, with its token, its timeout, and the retries that make
// a server's restart invisible to the caller. The rules are the Rust client's
// (host/client/src/client.rs), so that every client of a server behaves alike:
//
// - A 503 whose code says the server did nothing (`not_ready`, `too_many_waiting`,
//   `too_many_connections`, `too_many_requests`) is asked again, whatever the call.
// - Any other 503 is asked again only for a call that is safe to repeat (doing it twice is doing
//   it once: a read, a start with an id, a cancel, a heartbeat).
// - A refused connection (nothing listened, so nothing was sent) is asked again, whatever the
//   call; a dropped one (the server may or may not have done it) only for a call safe to repeat.
// - Nothing else is asked again: a 4xx, a timeout, a host name that does not resolve.
//
// Asking again stops once `retryFor` is spent. The pause between two asks is the 503's
// `Retry-After` (seconds, kept within 100 ms and 2 s), else 100 ms doubling up to 2 s.

import { BadRequest, Timeout, Unreachable, WfhostError, refusal } from "./errors.js";

/** The first pause before asking again, and the longest. */
const FIRST_PAUSE = 100;
const LONGEST_PAUSE = 2_000;

/** The 503 codes of a server that refused before doing anything: it has no host yet, or holds
 * as many requests or connections as it takes. Others (`unavailable`, `shutting_down`,
 * `store`) may come after a write. */
const NOTHING_DONE = new Set(["not_ready", "too_many_waiting", "too_many_connections", "too_many_requests"]);

/** Socket errors that mean the connection was dropped once the request may have been sent. */
const DROPPED = new Set([
  "ECONNRESET",
  "EPIPE",
  "ECONNABORTED",
  "UND_ERR_SOCKET",
  "UND_ERR_CLOSED",
]);

/** undici's own timeouts: no answer in time. */
const TIMED_OUT = new Set([
  "UND_ERR_HEADERS_TIMEOUT",
  "UND_ERR_BODY_TIMEOUT",
  "UND_ERR_CONNECT_TIMEOUT",
  "ETIMEDOUT",
]);

const USER_AGENT = "wfhost-client-js/0.1.0";

/**
 * A duration as the API writes it (`30s`, `500ms`) and in milliseconds. A number is seconds;
 * a string is passed through after checking it reads as one (`500ms`, `30s`, `2m`, `1h`, `1d`).
 * @param {number|string} wait
 * @returns {{text: string, ms: number}}
 */
export function duration(wait) {
  if (typeof wait === "number") {
    if (!Number.isFinite(wait) || wait < 0) {
      throw new BadRequest(`${wait} is not a duration: give seconds (a number >= 0)`, {
        code: "bad_request",
      });
    }
    const ms = Math.round(wait * 1_000);
    return { text: `${ms}ms`, ms };
  }
  const match = typeof wait === "string" && /^\s*(\d+(?:\.\d+)?)(ms|s|m|h|d)\s*$/.exec(wait);
  if (!match) {
    throw new BadRequest(
      `'${wait}' is not a duration: give seconds as a number, or a number and a unit (500ms, 30s, 2m)`,
      { code: "bad_request" },
    );
  }
  const unit = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }[match[2]];
  return { text: match[0].trim(), ms: Math.round(Number(match[1]) * unit) };
}

/**
 * `id` as one path segment: percent-encoded as `encodeURIComponent` does, and `.` too (ids may
 * hold `/`: children's do). An id that is `.` or `..` is refused here: fetch's URL parser reads
 * `%2E%2E` as `..` too, and would send the call to another route. The server takes no such id.
 * @param {string} id
 */
export function segment(id) {
  const text = String(id);
  if (text === "." || text === ".." || text === "") {
    throw new BadRequest(`'${text}' is not an id: it cannot be one segment of a URL`, {
      code: "bad_request",
    });
  }
  return encodeURIComponent(text).replace(/\./g, "%2E");
}

/**
 * `params` as a query string (`?a=1&b=2`, or nothing), leaving out what is null or undefined.
 * @param {Record<string, unknown>} params
 */
export function query(params) {
  const pairs = [];
  for (const [key, value] of Object.entries(params)) {
    if (value === undefined || value === null) continue;
    pairs.push(`${key}=${encodeURIComponent(String(value)).replace(/\./g, "%2E")}`);
  }
  return pairs.length ? `?${pairs.join("&")}` : "";
}

/** Resolves after `ms`, or rejects with the signal's reason once `signal` aborts. */
export function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(done, ms);
    function done() {
      signal?.removeEventListener("abort", aborted);
      resolve();
    }
    function aborted() {
      clearTimeout(timer);
      reject(signal.reason);
    }
    signal?.addEventListener("abort", aborted, { once: true });
  });
}

/** One server's calls: its base URL, token, timeout and retry window. */
export class Transport {
  /**
   * @param {string} url `http://host:port` or `https://host:port`, maybe with a path
   * @param {object} options
   * @param {string|null} [options.token]
   * @param {number} [options.timeout] milliseconds
   * @param {number} [options.retryFor] milliseconds
   * @param {string|null} [options.traceparent] a W3C trace context sent with every call
   */
  constructor(
    url,
    { token = null, timeout = 30_000, retryFor = 30_000, traceparent = null } = {},
  ) {
    const base = String(url).replace(/\/+$/, "");
    if (!/^https?:\/\//.test(base)) {
      throw new BadRequest(
        `'${url}' is not a server's address: give http://HOST:PORT or https://HOST:PORT`,
        { code: "bad_request" },
      );
    }
    this.base = base;
    this.token = token || null;
    this.traceparent = checkTraceparent(traceparent);
    this.timeout = timeout;
    this.retryFor = retryFor;
  }

  /**
   * One call, asked again as the rules above say: the status and the decoded body (null when
   * there is none) of an answer below 400; a refusal or a failed exchange throws.
   * @param {string} method
   * @param {string} path starting with `/`
   * @param {object} [options]
   * @param {unknown} [options.json] a body to send as JSON
   * @param {Uint8Array} [options.bytes] a body to send as `application/wasm`
   * @param {number} [options.wait] how long the server may wait on purpose (ms), added to the
   *   timeout
   * @param {boolean} [options.safe] whether doing it twice is doing it once (default: not a POST)
   * @param {AbortSignal} [options.signal] abandons the call (and its retries) when aborted
   * @param {number} [options.retryFor] this call's retry window (ms), if not the client's
   * @param {string|null} [options.traceparent] this call's W3C trace context, if not the
   *   client's
   * @returns {Promise<{status: number, body: any}>}
   */
  async request(
    method,
    path,
    {
      json,
      bytes,
      wait = 0,
      safe = method !== "POST",
      signal,
      retryFor = this.retryFor,
      traceparent = null,
    } = {},
  ) {
    traceparent = checkTraceparent(traceparent) ?? this.traceparent;
    // The window opens at the first failure, not at the call: a wait of 55 s that a restart
    // drops still has the whole window to find the server again.
    let until = null;
    let pause = FIRST_PAUSE;
    for (;;) {
      const answer = await this.#once(method, path, json, bytes, wait, signal, traceparent);
      if (answer.ok) return answer;
      const asked = again(answer, safe, pause);
      until ??= Date.now() + retryFor;
      if (asked === null || Date.now() + asked > until || signal?.aborted) {
        throw answer.error;
      }
      await sleep(asked, signal);
      pause = Math.min(pause * 2, LONGEST_PAUSE);
    }
  }

  /** One exchange: `{ok: true, status, body}`, or `{ok: false, error, retryAfter, dropped}`. */
  async #once(method, path, json, bytes, wait, signal, traceparent) {
    const headers = { "user-agent": USER_AGENT };
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    if (traceparent !== null) headers.traceparent = traceparent;
    let body;
    if (bytes !== undefined) {
      headers["content-type"] = "application/wasm";
      body = bytes;
    } else if (json !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(json);
    }
    const limit = this.timeout + wait;
    const timer = AbortSignal.timeout(limit);
    const abort = signal ? anySignal(signal, timer) : timer;
    let response;
    let text;
    try {
      response = await fetch(this.base + path, { method, headers, body, signal: abort });
      text = await response.text();
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      return failed(error, limit);
    }
    const status = response.status;
    if (status >= 400) {
      const seconds = Number.parseInt(response.headers.get("retry-after") ?? "", 10);
      return {
        ok: false,
        error: refused(status, text),
        retryAfter: Number.isFinite(seconds) ? seconds * 1_000 : null,
        dropped: false,
      };
    }
    if (text === "") return { ok: true, status, body: null };
    try {
      return { ok: true, status, body: JSON.parse(text) };
    } catch (error) {
      throw new WfhostError(
        `the server's answer (${status}) is not JSON (${error.message}): is it a wfhost server?`,
        { code: "bad_answer" },
      );
    }
  }
}

/** A W3C `traceparent` as given (null or undefined: null); anything but a string throws. The
 * server reads it as W3C Trace Context says, and ignores one it cannot read. */
function checkTraceparent(traceparent) {
  if (traceparent === undefined || traceparent === null) return null;
  if (typeof traceparent !== "string") {
    throw new TypeError(`a traceparent is a string, not ${typeof traceparent}`);
  }
  return traceparent;
}

/** A signal aborted when either is: `AbortSignal.any`, which Node has from 20.3 on. */
function anySignal(a, b) {
  if (typeof AbortSignal.any === "function") return AbortSignal.any([a, b]);
  const controller = new AbortController();
  for (const signal of [a, b]) {
    if (signal.aborted) controller.abort(signal.reason);
    else signal.addEventListener("abort", () => controller.abort(signal.reason), { once: true });
  }
  return controller.signal;
}

/** How long to wait before asking again, or null when not to ask again. */
function again(answer, safe, pause) {
  const error = answer.error;
  if (error.status === 503 && (safe || NOTHING_DONE.has(error.code))) {
    if (answer.retryAfter === null) return pause;
    return Math.min(Math.max(answer.retryAfter, FIRST_PAUSE), LONGEST_PAUSE);
  }
  if (error.status !== null) return null;
  if (error.code === "refused") return pause;
  if (answer.dropped && safe) return pause;
  return null;
}

/** The error of a refusal (`{"error": {"code", "message"}}`), or one made from its status. */
function refused(status, text) {
  try {
    const { error } = JSON.parse(text);
    if (typeof error?.code === "string" && typeof error?.message === "string") {
      return refusal(status, error.code, error.message);
    }
  } catch {
    // Not JSON: a proxy's page, say. Told by its status and its first words below.
  }
  return refusal(status, "http", `the server answered ${status}: ${text.slice(0, 300)}`);
}

/** A fetch that got no answer, as a failed exchange. */
function failed(error, limit) {
  const cause = error?.cause;
  const codes = [cause?.code, ...(cause?.errors ?? []).map((e) => e?.code)].filter(Boolean);
  if (error?.name === "TimeoutError" || codes.some((code) => TIMED_OUT.has(code))) {
    const timeout = new Timeout(`the server did not answer within ${limit} ms`, {
      code: "timeout",
      cause: error,
    });
    return { ok: false, error: timeout, retryAfter: null, dropped: false };
  }
  const why = cause?.message || error?.message || String(error);
  if (codes.includes("ECONNREFUSED")) {
    const refusedError = new Unreachable(`cannot reach the server (is it running?): ${why}`, {
      code: "refused",
      cause: error,
    });
    return { ok: false, error: refusedError, retryAfter: null, dropped: false };
  }
  const unreachable = new Unreachable(`cannot reach the server: ${why}`, {
    code: "unreachable",
    cause: error,
  });
  const dropped = codes.some((code) => DROPPED.has(code)) || error?.message === "terminated";
  return { ok: false, error: unreachable, retryAfter: null, dropped };
}
