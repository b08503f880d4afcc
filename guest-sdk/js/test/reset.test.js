// Resets against a real server: a failed workflow run again under its id (with its own module,
// then with the module's bytes), its runs listed, and the resets the server refuses.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { BadRequest, Client, Conflict, NotFound, Workflow, WorkflowFailed } from "../index.js";
import { shopModule, startServer } from "./helpers.js";

let server;
let client;
let wasm;
let module;

before(async () => {
  wasm = await shopModule();
  server = await startServer();
  client = new Client(server.url);
  module = (await client.putModule(wasm)).hash;
});

after(async () => {
  await server?.close();
});

/** Asserts that `promise` rejects with an error of `kind`, with `status` and `code`. */
async function refused(promise, kind, status, code) {
  await assert.rejects(promise, (error) => {
    assert.ok(error instanceof kind, `${error.name}: ${error.message}`);
    assert.equal(error.status, status);
    assert.equal(error.code, code);
    return true;
  });
}

describe("reset", () => {
  test("a failed workflow is reset, its runs listed, and a running one refused", async () => {
    const id = "reset-1";
    const failed = await client.start(module, "fail", { message: "no stock" }, { id, wait: 30 });
    assert.equal(failed.status, "failed");
    assert.equal(failed.run, 1);
    assert.deepEqual(
      (await client.runs(id)).map((w) => [w.id, w.run]),
      [[id, 1]],
    );

    // By default from the step before the one that failed it: its first, so none is kept.
    assert.deepEqual(await client.reset(id), {
      id,
      run: 2,
      previous: `${id}/run-1`,
      steps: 0,
      module,
      messages: 0,
    });
    await assert.rejects(client.result(id, { wait: 30 }), (error) => {
      assert.ok(error instanceof WorkflowFailed);
      assert.equal(error.workflow.run, 2);
      return true;
    });
    const runs = await client.runs(id);
    assert.ok(runs.every((run) => run instanceof Workflow));
    assert.deepEqual(
      runs.map((w) => [w.id, w.run, w.status]),
      [
        [`${id}/run-1`, 1, "failed"],
        [id, 2, "failed"],
      ],
    );

    // A module given as its bytes is stored first, then named by its hash.
    const again = await client.reset(id, { toStep: 0, module: wasm });
    assert.deepEqual(again, {
      id,
      run: 3,
      previous: `${id}/run-2`,
      steps: 0,
      module,
      messages: 0,
    });
    await assert.rejects(client.result(id, { wait: 30 }), WorkflowFailed);
    assert.deepEqual(
      (await client.runs(id)).map((w) => [w.id, w.run]),
      [
        [`${id}/run-1`, 1],
        [`${id}/run-2`, 2],
        [id, 3],
      ],
    );

    // Refused: a step past the last that may be kept, a workflow still running, an unknown id
    // or module.
    await refused(client.reset(id, { toStep: 5 }), BadRequest, 400, "invalid_input");
    const running = await client.start(module, "wait_for_message", null, { id: "reset-2" });
    await refused(client.reset(running.id), Conflict, 409, "conflict");
    assert.deepEqual(
      (await client.runs(running.id)).map((w) => [w.id, w.run, w.status]),
      [["reset-2", 1, "running"]],
    );
    await refused(client.reset("no-such-workflow"), NotFound, 404, "unknown_workflow");
    await refused(client.runs("no-such-workflow"), NotFound, 404, "unknown_workflow");
    await assert.rejects(client.reset(id, { module: "0".repeat(64) }), NotFound);
  });
});
