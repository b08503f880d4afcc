// What a call to a wfhost server can end in, other than its answer.
//
// A refusal by the server carries its HTTP status and the `code` and `message` of its
// `{"error": {"code", "message"}}` body; the class is chosen by the status, so that a caller can
// write `catch (e) { if (e instanceof NotFound) ... }`, and `code` says more (`unknown_workflow`,
// `conflict`, `task_moved_on`, ...). A call that got no answer has no status: `Unreachable`
// (code `refused`: nothing listened, so nothing was sent; or `unreachable`) or `Timeout`.
// A workflow that ended other than completed is not a failed call but an outcome the caller
// asked about: `WorkflowFailed`, `WorkflowCancelled`, or `StillRunning` when it had not ended.

/** Every error this package throws. */
export class WfhostError extends Error {
  /**
   * @param {string} message what was wrong and what to do about it
   * @param {{status?: number|null, code?: string, cause?: unknown}} [details]
   */
  constructor(message, { status = null, code = "error", cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    /** The HTTP status of the refusal; null when no answer came. */
    this.status = status;
    /** A word programs can match: the server's code, or this client's own. */
    this.code = code;
  }
}

/** 400: the request was wrong (a parameter, the JSON, an id), or never sent (a bad URL). */
export class BadRequest extends WfhostError {}
/** 401: no token, or not this server's. */
export class Unauthorized extends WfhostError {}
/** 403: a token that may not do this (a worker token for another function). */
export class Forbidden extends WfhostError {}
/** 404: no such workflow, module, schedule, task or route. */
export class NotFound extends WfhostError {}
/** 409: it exists otherwise (a start with another input), or it moved on (a task). */
export class Conflict extends WfhostError {}
/** 413: the body is larger than the server takes. */
export class TooLarge extends WfhostError {}
/** 429: too many of something at once (unread messages of a workflow). */
export class TooManyRequests extends WfhostError {}
/** 503: the server cannot now (starting, stopping, too busy); asked again within `retryFor`. */
export class Unavailable extends WfhostError {}
/** Another 5xx: the server failed. */
export class ServerError extends WfhostError {}

/** No answer came: no server listened (code `refused`) or the connection failed or was dropped
 * (code `unreachable`). */
export class Unreachable extends WfhostError {}

/** No answer came within the client's timeout (code `timeout`). */
export class Timeout extends WfhostError {}

/** The workflow failed (status `failed`): `kind` and `message` are its error's. */
export class WorkflowFailed extends WfhostError {
  /** @param {import("./client.js").Workflow} workflow */
  constructor(workflow) {
    const error = workflow.error ?? { kind: "failed", message: "the workflow failed" };
    const how = error.kind === "failed" ? "failed" : `failed (${error.kind})`;
    super(`workflow '${workflow.id}' ${how}: ${error.message}`, {
      code: "workflow_failed",
    });
    /** The error's kind: `failed`, `trap`, `limit`, `nondeterminism`, ... */
    this.kind = error.kind;
    /** The workflow as it ended. */
    this.workflow = workflow;
  }
}

/** The workflow was cancelled (status `cancelled`). */
export class WorkflowCancelled extends WfhostError {
  /** @param {import("./client.js").Workflow} workflow */
  constructor(workflow) {
    const why = workflow.error?.message;
    super(`workflow '${workflow.id}' was cancelled${why ? `: ${why}` : ""}`, {
      code: "workflow_cancelled",
    });
    this.kind = workflow.error?.kind ?? "cancelled";
    this.workflow = workflow;
  }
}

/** The workflow had not ended when the wait was spent (or it is paused or damaged). */
export class StillRunning extends WfhostError {
  /** @param {import("./client.js").Workflow} workflow */
  constructor(workflow) {
    super(`workflow '${workflow.id}' is still ${workflow.status}`, { code: "still_running" });
    this.workflow = workflow;
  }
}

const BY_STATUS = new Map([
  [400, BadRequest],
  [401, Unauthorized],
  [403, Forbidden],
  [404, NotFound],
  [409, Conflict],
  [413, TooLarge],
  [429, TooManyRequests],
  [503, Unavailable],
]);

/**
 * The error a refusal with `status` carries.
 * @param {number} status
 * @param {string} code
 * @param {string} message
 * @returns {WfhostError}
 */
export function refusal(status, code, message) {
  const Class = BY_STATUS.get(status) ?? (status >= 500 ? ServerError : WfhostError);
  return new Class(message, { status, code });
}
