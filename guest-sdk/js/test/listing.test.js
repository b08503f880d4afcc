// Listings and histories over several pages, a workflow's controls (cancel, pause, unpause),
// and the errors of an unknown id and of a missing token.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  BadRequest,
  Client,
  NotFound,
  Unauthorized,
  Workflow,
  WorkflowCancelled,
} from "../index.js";
import { shopModule, startServer, watchRequests } from "./helpers.js";

let server;
let guarded;
let client;
let module;

before(async () => {
  const wasm = await shopModule();
  [server, guarded] = await Promise.all([startServer(), startServer({ token: "s3cret-token" })]);
  client = new Client(server.url);
  module = (await client.putModule(wasm)).hash;
});

after(async () => {
  await Promise.all([server?.close(), guarded?.close()]);
});

describe("listings", () => {
  test("list follows the cursor over several pages", async () => {
    const ids = ["batch-0", "batch-1", "batch.2", "batch-3", "batch-4"];
    for (const [n, id] of ids.entries()) {
      await client.start(module, "echo", n, { id });
    }
    await client.start(module, "echo", "other", { id: "other-1" });
    const watcher = watchRequests(/^GET \/v1\/workflows$/);
    const listed = [];
    try {
      for await (const workflow of client.list({ prefix: "batch", pageSize: 2 })) {
        assert.ok(workflow instanceof Workflow);
        listed.push(workflow.id);
      }
    } finally {
      watcher.restore();
    }
    assert.deepEqual(listed, ids);
    assert.equal(watcher.count, 3);
  });

  test("list filters by entry point and status", async () => {
    const failed = await client.start(module, "fail", null, { id: "to-fail", wait: 30 });
    assert.equal(failed.status, "failed");
    const found = [];
    for await (const workflow of client.list({ status: "failed", pageSize: 10 })) {
      found.push(workflow.id);
    }
    assert.deepEqual(found, ["to-fail"]);
    const echoes = [];
    for await (const workflow of client.list({ entry: "echo", topLevel: true })) {
      echoes.push(workflow.id);
    }
    assert.equal(echoes.length, 6);
  });

  test("history follows the cursor over every step", async () => {
    const id = "ticker";
    assert.equal(await client.execute(module, "tick", { steps: 3 }, { id }), 3);
    const { steps } = await client.status(id);
    assert.ok(steps > 1, `${steps} steps`);
    const watcher = watchRequests(/\/history$/);
    const seen = [];
    try {
      for await (const step of client.history(id, { pageSize: 1 })) seen.push(step);
    } finally {
      watcher.restore();
    }
    assert.deepEqual(
      seen.map((step) => step.step),
      Array.from({ length: steps }, (_, i) => i + 1),
    );
    assert.deepEqual(seen.at(-1).status, { done: 3 });
    assert.equal(watcher.count, steps);
  });
});

describe("controls", () => {
  test("cancel ends a waiting workflow as cancelled", async () => {
    const { id } = await client.start(module, "wait_for_message", null, { id: "to-cancel" });
    const cancel = await client.cancel(id);
    assert.deepEqual(cancel, { cancel: "asked", status: "running" });
    await assert.rejects(client.result(id, { wait: 30 }), (error) => {
      assert.ok(error instanceof WorkflowCancelled);
      assert.equal(error.workflow.status, "cancelled");
      assert.equal(error.workflow.cancelAsked, true);
      return true;
    });
    assert.deepEqual(await client.cancel(id), { cancel: "ended", status: "cancelled" });
  });

  test("pause holds a workflow and unpause lets it go on", async () => {
    const { id } = await client.start(module, "wait_for_message", null, { id: "to-pause" });
    assert.deepEqual(await client.pause(id), { pause: "done", paused: true, status: "paused" });
    assert.deepEqual(await client.pause(id), { pause: "already", paused: true, status: "paused" });
    const paused = await client.status(id);
    assert.equal(paused.status, "paused");
    assert.equal(paused.paused, true);
    await client.send(id, "held");
    assert.equal((await client.status(id)).unreadMessages, 1);
    assert.deepEqual(await client.unpause(id), { pause: "done", paused: false, status: "running" });
    assert.deepEqual(await client.result(id, { wait: 30 }), { got: "held" });
  });
});

describe("errors", () => {
  test("an unknown workflow is NotFound", async () => {
    for (const call of [
      () => client.status("no-such-workflow"),
      () => client.result("no-such-workflow"),
      () => client.send("no-such-workflow", 1),
      () => client.cancel("a.b"),
    ]) {
      await assert.rejects(call(), (error) => {
        assert.ok(error instanceof NotFound, `${error.name}: ${error.message}`);
        assert.equal(error.status, 404);
        assert.equal(error.code, "unknown_workflow");
        return true;
      });
    }
  });

  test("an id that a URL would read as a step is refused before it is sent", async () => {
    for (const id of [".", ".."]) {
      await assert.rejects(client.cancel(id), (error) => {
        assert.ok(error instanceof BadRequest);
        assert.equal(error.status, null);
        assert.equal(error.code, "bad_request");
        return true;
      });
    }
  });

  test("a server with a token refuses a client without it", async () => {
    await assert.rejects(new Client(guarded.url).status("any"), (error) => {
      assert.ok(error instanceof Unauthorized);
      assert.equal(error.status, 401);
      assert.equal(error.code, "unauthorized");
      return true;
    });
    await assert.rejects(new Client(guarded.url, { token: "another" }).modules(), Unauthorized);
    const allowed = new Client(guarded.url, { token: "s3cret-token" });
    assert.deepEqual(await allowed.modules(), []);
    assert.deepEqual(await allowed.ready(), { status: "ok" });
  });
});
