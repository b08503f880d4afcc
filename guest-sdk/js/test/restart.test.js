// A server killed (SIGKILL, as a crash) and started again on the same port and store: a
// client's wait in flight, a worker's poll in flight, and calls made while it is down all
// carry on once it is back.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Client, Unavailable, Unreachable, Worker } from "../index.js";
import { deferred, shopModule, startServer, watchRequests } from "./helpers.js";

let server;
let client;
let module;

before(async () => {
  const wasm = await shopModule();
  server = await startServer();
  client = new Client(server.url, { retryFor: 60_000 });
  module = (await client.putModule(wasm)).hash;
});

after(async () => {
  await server?.close();
});

describe("a server restart", { timeout: 120_000 }, () => {
  test("a result waited for across the restart comes", async () => {
    const { id } = await client.start(module, "wait_for_message", null, { id: "across" });
    const watcher = watchRequests(/\/result$/);
    let waiting;
    try {
      const sent = watcher.next();
      waiting = client.result(id, { wait: 50 });
      await sent;
      await server.restart();
      // The wait was dropped with the connection and asked again: the same request twice.
      await client.send(id, "after the restart");
      assert.deepEqual(await waiting, { got: "after the restart" });
      assert.ok(watcher.count >= 2, `${watcher.count} requests`);
    } finally {
      watcher.restore();
    }
  });

  test("a call made while the server is down succeeds once it is back", async () => {
    const { id } = await client.start(module, "wait_for_message", null, { id: "while-down" });
    await server.kill();
    const watcher = watchRequests(/^GET \/v1\/workflows\/while-down$/);
    const refusedSend = watchRequests(/\/messages$/);
    try {
      const asked = watcher.next();
      const status = client.status(id);
      await asked;
      // A message is not safe to send twice, but a refused connection sent nothing.
      const sending = client.send(id, "sent while down");
      await server.start();
      const workflow = await status;
      assert.equal(workflow.id, id);
      // Both were asked again once the server was back, in either order: the message may have
      // ended the workflow before its status was read.
      assert.ok(["running", "completed"].includes(workflow.status), workflow.status);
      assert.equal(typeof (await sending), "number");
      assert.ok(watcher.count >= 2, `${watcher.count} requests`);
      assert.ok(refusedSend.count >= 2, `${refusedSend.count} requests`);
    } finally {
      refusedSend.restore();
      watcher.restore();
    }
    assert.deepEqual(await client.result(id, { wait: 30 }), { got: "sent while down" });
  });

  test("without retries a call to a server that is down fails at once", async () => {
    await server.kill();
    try {
      await assert.rejects(new Client(server.url, { retryFor: 0 }).status("any"), (error) => {
        assert.ok(error instanceof Unreachable);
        assert.equal(error.code, "refused");
        assert.equal(error.status, null);
        return true;
      });
    } finally {
      await server.start();
    }
  });

  test("a worker polling across the restart serves a task started after it", async () => {
    const reported = [];
    const failed = deferred();
    const worker = new Worker(server.url, {
      pollWait: 30,
      onError: (error) => {
        reported.push(error);
        failed.resolve();
      },
    });
    const served = [];
    worker.register("payments.charge", async (input, task) => {
      served.push(task.attempt);
      return `charged ${input.id}`;
    });
    const watcher = watchRequests(/\/v1\/tasks\/poll$/);
    const polling = watcher.next();
    const running = worker.run();
    try {
      await polling;
      await server.kill();
      // The poll in flight was dropped: reported, and asked again until the server is back.
      await failed.promise;
      await server.start();
      const result = await client.execute(module, "checkout", { id: 5 }, { id: "after-restart" });
      assert.deepEqual(result, { order: 5, receipt: "charged 5" });
      assert.deepEqual(served, [1]);
      assert.ok(reported.length >= 1);
      for (const error of reported) {
        assert.ok(error instanceof Unreachable || error instanceof Unavailable, String(error));
      }
    } finally {
      watcher.restore();
      await worker.stop({ grace: 0 });
      await running;
    }
  });
});
