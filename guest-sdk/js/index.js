// wfhost-client: a client of the HTTP API of `wfhost serve --http`, and an activity worker.
// See README.md; the types and their documentation are in index.d.ts.

export { Client, Workflow, Schedule } from "./src/client.js";
export { Worker, Rejected } from "./src/worker.js";
export {
  WfhostError,
  BadRequest,
  Unauthorized,
  Forbidden,
  NotFound,
  Conflict,
  TooLarge,
  TooManyRequests,
  Unavailable,
  ServerError,
  Unreachable,
  Timeout,
  WorkflowFailed,
  WorkflowCancelled,
  StillRunning,
} from "./src/errors.js";
