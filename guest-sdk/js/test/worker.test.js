// The worker against a real server: a workflow's call served, a rejection, several tasks at
// once, a stop that gives an unfinished task back to another worker, and the trace context a
// traced server gives each task.
//
// Every test synchronises on promises the functions resolve; none sleeps.

import assert from "node:assert/strict";
import { after, afterEach, before, describe, test } from "node:test";

import { Client, Rejected, Worker, WorkflowFailed } from "../index.js";
import { deferred, shopModule, startServer, watchRequests } from "./helpers.js";

/** A W3C trace context as a caller sends it, and another. */
const CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN = "00f067aa0ba902b7";
const CALLER = `00-${CALLER_TRACE}-${CALLER_SPAN}-01`;
const OTHER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const TRACEPARENT = /^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/;

let server;
let client;
let module;
/** The workers a test started, stopped after it whatever happened. */
const workers = [];
/** What the workers reported: nothing, in every test here. */
const reported = [];

before(async () => {
  const wasm = await shopModule();
  server = await startServer();
  client = new Client(server.url);
  module = (await client.putModule(wasm)).hash;
});

/** Stops the workers started so far. */
async function stopWorkers() {
  await Promise.all(
    workers.splice(0).map(({ worker, running }) => worker.stop({ grace: 0 }).then(() => running)),
  );
}

afterEach(async () => {
  await stopWorkers();
  assert.deepEqual(reported.splice(0), []);
});

after(async () => {
  await server?.close();
});

/** A worker of `on` (the test server) serving `charge` as `payments.charge`, running. */
function serve(charge, options = {}, on = server) {
  const onError = (error, context) => reported.push(`${context}: ${error.message}`);
  const worker = new Worker(on.url, { pollWait: 5, onError, ...options });
  worker.register("payments.charge", charge);
  const running = worker.run();
  workers.push({ worker, running });
  return { worker, running };
}

describe("worker", { timeout: 60_000 }, () => {
  test("run refuses a worker without functions", async () => {
    await assert.rejects(new Worker(server.url).run(), /no functions registered/);
  });

  test("a workflow's call is served with the function's result", async () => {
    const seen = [];
    serve(async (input, task) => {
      seen.push({ input, task });
      return { charged: input.amount, by: "js" };
    });
    const id = "checkout-1";
    const result = await client.execute(module, "checkout", { id: 1, amount: 250 }, { id });
    assert.deepEqual(result, { order: 1, receipt: { charged: 250, by: "js" } });
    assert.equal(seen.length, 1);
    const [{ input, task }] = seen;
    assert.deepEqual(input, { id: 1, amount: 250 });
    assert.equal(task.function, "payments.charge");
    assert.equal(task.attempt, 1);
    assert.equal(task.idempotencyKey, `${id}#1`);
    assert.equal(typeof task.id, "string");
    assert.ok(task.deadline instanceof Date);
    assert.ok(task.deadline.getTime() > Date.now());
    assert.equal(task.signal.aborted, false);
    // The server is not traced: no trace context.
    assert.equal(task.traceparent, null);
    // The server saw the worker by its name, and took its completion.
    const charge = (await client.workers()).functions.find((f) => f.function === "payments.charge");
    assert.deepEqual(
      charge.pollers.map((p) => p.name),
      [workers[0].worker.name],
    );
    assert.equal(charge.completed, 1);
  });

  test("an untraced server gives a task no trace context, whatever the start sent", async () => {
    const seen = [];
    serve(async (input, task) => {
      seen.push(task.traceparent);
      return input.id;
    });
    const result = await client.execute(
      module,
      "checkout",
      { id: 13 },
      { id: "untraced", traceparent: CALLER },
    );
    assert.deepEqual(result, { order: 13, receipt: 13 });
    assert.deepEqual(seen, [null]);
  });

  test("a function returning nothing answers null", async () => {
    serve(async () => {});
    assert.deepEqual(await client.execute(module, "checkout", { id: 2 }), {
      order: 2,
      receipt: null,
    });
  });

  test("a Rejected fails the call, and so the workflow, with its message", async () => {
    serve(async () => {
      throw new Rejected("card declined");
    });
    await assert.rejects(client.execute(module, "checkout", { id: 3 }), (error) => {
      assert.ok(error instanceof WorkflowFailed);
      assert.match(error.message, /rejected: card declined/);
      return true;
    });
  });

  test("tasks run at once up to the concurrency, and no more", async () => {
    const concurrency = 4;
    let running = 0;
    let most = 0;
    let calls = 0;
    const full = deferred();
    const go = deferred();
    serve(
      async (input) => {
        calls += 1;
        running += 1;
        most = Math.max(most, running);
        if (running === concurrency) full.resolve();
        await go.promise;
        running -= 1;
        return input.id;
      },
      { concurrency },
    );
    const ids = ["a", "b", "c", "d", "e", "f"];
    const results = ids.map((id) =>
      client.execute(module, "checkout", { id }, { id: `many-${id}` }),
    );
    await full.promise;
    // Four are held; the others wait on the server for a free slot.
    assert.equal(running, concurrency);
    assert.equal(calls, concurrency);
    go.resolve();
    const answers = await Promise.all(results);
    assert.deepEqual(
      answers.map((answer) => answer.receipt),
      ids,
    );
    assert.equal(most, concurrency);
    assert.equal(calls, ids.length);
  });

  test("stop gives an unfinished task back, and another worker takes it", async () => {
    const entered = deferred();
    const aborted = deferred();
    const first = serve(async (input, task) => {
      entered.resolve(task);
      task.signal.addEventListener("abort", () => aborted.resolve(task.signal.reason));
      await aborted.promise;
      return "from the stopped worker";
    });
    const id = "handed-over";
    await client.start(module, "checkout", { id: 9 }, { id });
    const held = await entered.promise;
    assert.equal(held.attempt, 1);
    await first.worker.stop({ grace: 0 });
    await first.running;
    assert.equal((await aborted.promise).name, "WorkerStopped");

    const attempts = [];
    serve(async (input, task) => {
      attempts.push(task.attempt);
      assert.equal(task.idempotencyKey, held.idempotencyKey);
      return "from the second worker";
    });
    assert.deepEqual(await client.result(id, { wait: 30 }), {
      order: 9,
      receipt: "from the second worker",
    });
    assert.deepEqual(attempts, [2]);
  });

  test("stop waits for the tasks running within its grace", async () => {
    const entered = deferred();
    const finish = deferred();
    const { worker, running } = serve(async () => {
      entered.resolve();
      await finish.promise;
      return "finished in the grace";
    });
    const id = "graceful";
    await client.start(module, "checkout", { id: 10 }, { id });
    await entered.promise;
    const stopped = worker.stop({ grace: 30 });
    finish.resolve();
    await stopped;
    await running;
    assert.deepEqual(await client.result(id, { wait: 30 }), {
      order: 10,
      receipt: "finished in the grace",
    });
  });
});

describe("heartbeats", { timeout: 60_000 }, () => {
  // A server whose tasks go to another worker 3 s after their last heartbeat.
  let quick;
  let quickClient;

  before(async () => {
    quick = await startServer({ args: ["--task-timeout", "3s"] });
    quickClient = new Client(quick.url);
    await quickClient.putModule(await shopModule());
  });

  after(async () => {
    await quick?.close();
  });

  test("a task running past its first deadline is kept by heartbeats", async () => {
    const entered = deferred();
    const finish = deferred();
    serve(
      async (input, task) => {
        entered.resolve({ ...task });
        await finish.promise;
        return `held past ${task.deadline.toISOString()}`;
      },
      {},
      quick,
    );
    const beats = watchRequests(/\/heartbeat$/);
    try {
      const id = "long-charge";
      await quickClient.start(module, "checkout", { id: 11 }, { id });
      const first = await entered.promise;
      // Three heartbeats sent (the third after the second's answer moved the deadline): the
      // task is past the 3 s it was first given.
      for (let n = 0; n < 3; n++) await beats.next();
      assert.ok(Date.now() > first.deadline.getTime() - 1_000);
      finish.resolve();
      const { receipt } = await quickClient.result(id, { wait: 30 });
      assert.match(receipt, /^held past /);
      assert.ok(new Date(receipt.slice("held past ".length)) > first.deadline);
    } finally {
      beats.restore();
    }
  });

  test("a task that moved on aborts its signal, and its completion is not sent", async () => {
    // Tasks of this server go to another worker 500 ms after their last heartbeat: before the
    // first one (heartbeats are at least 1 s apart), so this one moves on to the second worker.
    const hasty = await startServer({ args: ["--task-timeout", "500ms"] });
    try {
      const hastyClient = new Client(hasty.url);
      await hastyClient.putModule(await shopModule());
      const entered = deferred();
      const movedOn = deferred();
      const first = serve(
        async (input, task) => {
          entered.resolve();
          task.signal.addEventListener("abort", () => movedOn.resolve(task.signal.reason));
          await movedOn.promise;
          return "too late";
        },
        // One at a time: it does not take the task again when it moves on.
        { concurrency: 1 },
        hasty,
      );
      const id = "moved-on";
      await hastyClient.start(module, "checkout", { id: 12 }, { id });
      await entered.promise;
      const attempts = [];
      serve(
        async (input, task) => {
          attempts.push(task.attempt);
          return "from the second worker";
        },
        {},
        hasty,
      );
      assert.deepEqual(await hastyClient.result(id, { wait: 30 }), {
        order: 12,
        receipt: "from the second worker",
      });
      assert.deepEqual(attempts, [2]);
      const completions = watchRequests(/\/complete$/);
      try {
        const reason = await movedOn.promise;
        assert.equal(reason.name, "TaskMovedOn");
        assert.match(reason.message, /task_moved_on|moved on/);
        // Once its function has returned, the first worker has nothing to complete.
        await first.worker.stop({ grace: 30 });
        await first.running;
        assert.equal(completions.count, 0);
      } finally {
        completions.restore();
      }
    } finally {
      // The workers go before their server does, so that they report no lost connection.
      await stopWorkers();
      await hasty.close();
    }
  });
});

describe("traces", { timeout: 60_000 }, () => {
  // A server traced to a collector that cannot be reached: exports fail (and are only logged),
  // tasks still carry the trace context.
  let traced;
  let tracedClient;
  let tracedModule;

  before(async () => {
    traced = await startServer({ args: ["--otlp-endpoint", "http://127.0.0.1:9"] });
    tracedClient = new Client(traced.url);
    tracedModule = (await tracedClient.putModule(await shopModule())).hash;
  });

  after(async () => {
    await stopWorkers();
    await traced?.close();
  });

  test("a task carries its call's trace context, in the trace of the start", async () => {
    const seen = new Map();
    serve(
      async (input, task) => {
        seen.set(input.id, task.traceparent);
        return input.id;
      },
      {},
      traced,
    );
    const run = async (on, id, options = {}) =>
      (await on.execute(tracedModule, "checkout", { id }, { id: `trace-${id}`, ...options }))
        .receipt;
    // No trace of the caller's: the server's own.
    assert.equal(await run(tracedClient, 1), 1);
    // The start's traceparent: the workflow, and so its call, joins the caller's trace.
    assert.equal(await run(tracedClient, 2, { traceparent: CALLER }), 2);
    await tracedClient.start(tracedModule, "checkout", { id: 3 }, {
      id: "trace-3",
      traceparent: CALLER,
    });
    assert.deepEqual(await tracedClient.result("trace-3", { wait: 30 }), { order: 3, receipt: 3 });
    // The client's traceparent, with every call; a start's own wins over it.
    assert.equal(await run(new Client(traced.url, { traceparent: CALLER }), 4), 4);
    assert.equal(
      await run(new Client(traced.url, { traceparent: OTHER }), 5, { traceparent: CALLER }),
      5,
    );
    assert.deepEqual([...seen.keys()].sort(), [1, 2, 3, 4, 5]);
    for (const [id, traceparent] of seen) {
      assert.match(traceparent, TRACEPARENT, `task ${id}`);
    }
    const traceId = (id) => seen.get(id).split("-")[1];
    const spanIds = [...seen.values()].map((traceparent) => traceparent.split("-")[2]);
    assert.notEqual(traceId(1), CALLER_TRACE);
    assert.deepEqual([2, 3, 4, 5].map(traceId), Array(4).fill(CALLER_TRACE));
    // The task's span is the workflow's call, a descendant of the caller's span, not it.
    assert.ok(!spanIds.includes(CALLER_SPAN));
    assert.equal(new Set(spanIds).size, 5);
  });
});
