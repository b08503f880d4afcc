// The client against a real server: modules, starts (with and without an id, with and without a
// wait), results, failures, and a workflow that waits for a message.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  BadRequest,
  Client,
  Conflict,
  NotFound,
  StillRunning,
  Workflow,
  WorkflowFailed,
} from "../index.js";
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

/** `bytes` with a custom section more: the same code, other bytes (another hash). */
function anotherModule(bytes) {
  const name = new TextEncoder().encode("wfhost-client-test");
  const content = [name.length, ...name, "2".charCodeAt(0)];
  const another = new Uint8Array(bytes.length + 2 + content.length);
  another.set(bytes);
  another.set([0, content.length, ...content], bytes.length);
  return another;
}

describe("modules and starts", () => {
  test("a module is new once, then known", async () => {
    const again = await client.putModule(wasm);
    assert.equal(again.new, false);
    assert.equal(again.hash, module);
    assert.match(again.hash, /^[0-9a-f]{64}$/);
    assert.equal(again.size, wasm.length);
    assert.deepEqual(again.entryPoints, [
      "announce",
      "checkout",
      "echo",
      "fail",
      "tick",
      "wait_for_message",
    ]);
    const modules = await client.modules();
    assert.deepEqual(
      modules.map((m) => m.hash),
      [module],
    );
    assert.equal(modules[0].size, wasm.length);
  });

  test("a module stored first is new", async () => {
    // A store of its own, so that this put is its first.
    const fresh = await startServer();
    try {
      const other = new Client(fresh.url);
      const first = await other.putModule(wasm);
      assert.equal(first.new, true);
      assert.equal(first.hash, module);
      const second = await other.putModule(new Uint8Array(wasm));
      assert.equal(second.new, false);
    } finally {
      await fresh.close();
    }
  });

  test("a module stored under a name is started by the name, or by name@version", async () => {
    // A store of its own, so that the name's versions and the modules listed are this test's.
    const fresh = await startServer();
    try {
      const named = new Client(fresh.url);
      const first = await named.putModule(wasm, { name: "shop" });
      assert.equal(first.new, true);
      assert.equal(first.hash, module);
      assert.deepEqual(first.names, [{ name: "shop", version: 1 }]);
      // Sent again, the same bytes under the same name: nothing new, still version 1.
      const again = await named.putModule(wasm, { name: "shop" });
      assert.equal(again.new, false);
      assert.equal(again.hash, module);
      assert.deepEqual(again.names, [{ name: "shop", version: 1 }]);
      assert.deepEqual(
        (await named.modules()).map((m) => [m.hash, m.names]),
        [[module, [{ name: "shop", version: 1 }]]],
      );

      const started = await named.start("shop", "echo", "by name", { id: "named-1", wait: 30 });
      assert.equal(started.module, module);
      assert.equal(started.moduleName, "shop");
      assert.equal(started.result, "by name");
      assert.equal((await named.status("named-1")).moduleName, "shop");

      // Other bytes under the name: its next version, which the name alone now starts.
      const second = await named.putModule(anotherModule(wasm), { name: "shop" });
      assert.equal(second.new, true);
      assert.notEqual(second.hash, module);
      assert.deepEqual(second.names, [{ name: "shop", version: 2 }]);
      const latest = await named.start("shop", "echo", 2, { id: "named-2", wait: 30 });
      assert.deepEqual([latest.module, latest.moduleName, latest.result], [second.hash, "shop", 2]);
      const pinned = await named.start("shop@1", "echo", 1, { id: "named-3", wait: 30 });
      assert.deepEqual([pinned.module, pinned.moduleName, pinned.result], [module, "shop", 1]);
      const listed = Object.fromEntries((await named.modules()).map((m) => [m.hash, m.names]));
      assert.deepEqual(listed, {
        [module]: [{ name: "shop", version: 1 }],
        [second.hash]: [{ name: "shop", version: 2 }],
      });

      await assert.rejects(named.putModule(wasm, { name: "1-shop" }), (error) => {
        assert.ok(error instanceof BadRequest);
        assert.equal(error.status, 400);
        assert.equal(error.code, "bad_request");
        return true;
      });
      for (const unknown of ["nope", "shop@3"]) {
        await assert.rejects(named.start(unknown, "echo", 1), (error) => {
          assert.ok(error instanceof NotFound);
          assert.equal(error.status, 404);
          assert.equal(error.code, "unknown_module");
          return true;
        });
      }
    } finally {
      await fresh.close();
    }
  });

  test("a start with an id: started, then found with the same input, refused with another", async () => {
    const id = "order-7.1";
    const started = await client.start(module, "echo", { n: 7 }, { id });
    assert.ok(started instanceof Workflow);
    assert.equal(started.new, true);
    assert.equal(started.id, id);
    assert.equal(started.entry, "echo");
    assert.equal(started.module, module);
    assert.ok(started.started instanceof Date);
    assert.deepEqual(started.input, { n: 7 });
    assert.deepEqual(await client.result(id), { n: 7 });

    const again = await client.start(module, "echo", { n: 7 }, { id });
    assert.equal(again.new, false);
    assert.equal(again.id, id);
    assert.equal(again.status, "completed");

    await assert.rejects(client.start(module, "echo", { n: 8 }, { id }), (error) => {
      assert.ok(error instanceof Conflict);
      assert.equal(error.status, 409);
      assert.equal(error.code, "conflict");
      assert.match(error.message, /another input/);
      return true;
    });

    const status = await client.status(id);
    assert.equal(status.status, "completed");
    assert.deepEqual(status.result, { n: 7 });
    assert.ok(status.finished instanceof Date);
    assert.equal(status.error, null);
    assert.equal(status.raw.id, id);
  });

  test("a start without an id gets one from the server", async () => {
    const started = await client.start(module, "echo");
    assert.equal(started.new, true);
    assert.match(started.id, /^wf-[0-9a-f]{16}$/);
    assert.equal(await client.result(started.id), null);
  });
});

describe("waits and outcomes", () => {
  test("a start with a wait answers the workflow as it ended", async () => {
    const workflow = await client.start(module, "echo", ["a", 1], { wait: 30 });
    assert.equal(workflow.new, true);
    assert.equal(workflow.status, "completed");
    assert.deepEqual(workflow.result, ["a", 1]);
    assert.ok(workflow.finished instanceof Date);
  });

  test("execute answers the result", async () => {
    assert.deepEqual(await client.execute(module, "echo", { x: [1, 2, 3] }), { x: [1, 2, 3] });
    assert.equal(
      await client.execute(module, "echo", "text", { id: "exec-1", wait: "30s" }),
      "text",
    );
  });

  test("execute of a failing workflow throws WorkflowFailed with its message", async () => {
    await assert.rejects(client.execute(module, "fail", { message: "card expired" }), (error) => {
      assert.ok(error instanceof WorkflowFailed);
      assert.equal(error.kind, "failed");
      assert.match(error.message, /RangeError: card expired/);
      assert.equal(error.workflow.status, "failed");
      assert.equal(error.workflow.error.kind, "failed");
      return true;
    });
  });

  test("a workflow waiting for a message runs until it comes", async () => {
    const workflow = await client.start(module, "wait_for_message", null, { wait: 0.05 });
    assert.equal(workflow.new, true);
    assert.equal(workflow.status, "running");
    await assert.rejects(client.result(workflow.id, { wait: 0 }), (error) => {
      assert.ok(error instanceof StillRunning);
      assert.equal(error.workflow.status, "running");
      return true;
    });
    const number = await client.send(workflow.id, { word: "confirm" });
    assert.equal(typeof number, "number");
    assert.deepEqual(await client.result(workflow.id, { wait: 30 }), { got: { word: "confirm" } });
  });

  test("the outbox gives what the workflow sent the host", async () => {
    const id = "announcer";
    assert.equal(await client.execute(module, "announce", ["one", { two: 2 }], { id }), 2);
    const page = await client.outbox(id);
    assert.deepEqual(
      page.messages.map((m) => [m.tag, m.data]),
      [
        [1, "one"],
        [2, { two: 2 }],
      ],
    );
    assert.ok(page.messages.every((m) => m.at instanceof Date));
    assert.equal(page.finished, true);
    const rest = await client.outbox(id, { after: page.next });
    assert.deepEqual(rest.messages, []);
  });

  test("counts say how the workflows stand", async () => {
    const counts = await client.counts({ entry: "fail" });
    assert.equal(counts.failed, 1);
    assert.equal(counts.completed, 0);
    assert.equal(counts.running, 0);
  });
});
