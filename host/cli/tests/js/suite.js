// The scenario suite of JavaScript workflows: what host/cli/tests/js.rs runs.

import { HOST, Cancelled, CommandError } from "wfhost";
import { double } from "./helpers.js";

export async function greet(ctx, name) {
  ctx.info(`greeting ${name}`);
  return `Hello, ${name}!`;
}

export async function timers(ctx, n) {
  // Several timers at once: they end in the order of their lengths, whatever the order made.
  const order = [];
  const nap = async (i) => {
    await ctx.sleep(100 * (n - i));
    order.push(i);
    return i;
  };
  const values = await Promise.all(Array.from({ length: n }, (_, i) => nap(i)));
  const first = await Promise.race([ctx.sleep(3_600_000).then(() => 0), ctx.sleep(10).then(() => 1)]);
  return { values, order, first };
}

export async function echo(ctx, n) {
  for (let i = 0; i < n; i++) {
    const message = await ctx.recv();
    await ctx.send(message.from, double(message.value));
  }
  return n;
}

export async function messages(ctx, n) {
  const child = await ctx.spawn("echo", n);
  const got = [];
  for (let i = 0; i < n; i++) {
    await ctx.send(child, { from: ctx.pid, value: i });
    got.push(await ctx.recv());
  }
  const nothing = (await ctx.recv({ timeout: 10 })) ?? null;
  await ctx.send(HOST, { got });
  return { got, nothing, echoed: await ctx.join(child) };
}

export async function square(ctx, n) {
  return n * n;
}

export async function fail(ctx, text) {
  throw new RangeError(text);
}

export async function family(ctx, n) {
  const children = [];
  for (let i = 0; i < n; i++) children.push(await ctx.spawn("square", i));
  const values = await Promise.all(children.map((child) => ctx.join(child)));
  const bad = await ctx.spawn("fail", "a bad child");
  let caught = null;
  try {
    await ctx.join(bad);
  } catch (error) {
    caught = error instanceof CommandError ? error.kind : `not a CommandError: ${error}`;
  }
  return { values, caught };
}

export async function stubborn(ctx) {
  try {
    await ctx.sleep(3_600_000);
    return "slept";
  } catch (error) {
    if (!(error instanceof Cancelled)) throw error;
    // Clean-up still runs commands.
    await ctx.sleep(1);
    await ctx.send(HOST, "cleaned up");
    throw error;
  }
}

export async function canceller(ctx, entry) {
  const child = await ctx.spawn(entry, null);
  await ctx.sleep(10);
  await ctx.cancel(child);
  try {
    await ctx.join(child);
  } catch (error) {
    return error.kind;
  }
  return "not cancelled";
}

export async function patched(ctx) {
  return ctx.patched("v2");
}

export async function call(ctx, value) {
  return await ctx.call("double", value);
}

export async function reads(ctx) {
  // The language's clocks and randomness, and the context's: a durable host journals what they
  // read, so a workflow started again after a crash reads the same.
  const bytes = crypto.getRandomValues(new Uint8Array(4));
  const seen = {
    time: Date.now(),
    now: new Date().toISOString(),
    random: Math.random(),
    uuid: crypto.randomUUID(),
    bytes: Array.from(bytes),
    ctx_random: ctx.random(),
    ctx_now: ctx.now(),
  };
  // Printed at once (a message to the host goes out when the step is journaled).
  console.log(JSON.stringify(seen));
  await ctx.sleep(50);
  return seen;
}

export async function forbidden(ctx, what) {
  if (what === "import") {
    await import("node:fs");
  }
  if (what === "timer") {
    setTimeout(() => {}, 10);
  }
  if (what === "weakref") {
    new WeakRef({});
  }
  if (what === "require") {
    require("fs");
  }
  return "allowed";
}

export async function spin() {
  for (;;) {}
}

export async function bomb() {
  const hoard = [];
  for (let i = 0; ; i++) hoard.push("x".repeat(4 << 20) + i);
}

export async function deep(ctx, n) {
  const down = (k) => (k === 0 ? 0 : 1 + down(k - 1));
  try {
    return down(n);
  } catch (error) {
    return `${error.name}: ${error.message}`;
  }
}

export async function fetch(ctx, url) {
  const response = await ctx.http(url, {
    method: "POST",
    headers: [
      ["x-one", "1"],
      ["x-two", "2"],
    ],
    body: "ping",
    timeout: 30_000,
  });
  return { status: response.status, body: response.text(), seen: response.header("x-seen") };
}

// Not an entry point: not async.
export function helper() {
  return 1;
}

export async function counter(ctx) {
  // Adds up the numbers it is sent until "stop".
  let total = 0;
  for (;;) {
    const message = await ctx.recv();
    if (message === "stop") break;
    total += message;
  }
  return total; // v1
}

export async function remind(ctx, days) {
  // A day's sleep, a worker's text and a message to the host, `days` times: under the test
  // harness's virtual clock, the language's clock and the context's move with the sleeps.
  const start = Date.now();
  const ctxStart = ctx.now();
  for (let day = 1; day <= days; day++) {
    await ctx.sleep(86_400_000);
    await ctx.send(HOST, await ctx.call("reminder_text", day));
  }
  return {
    days: Math.round((Date.now() - start) / 86_400_000),
    ctx_days: Math.round((ctx.now() - ctxStart) / 86_400_000),
  };
}

export async function select(ctx) {
  const child = await ctx.spawn("echo", 2);
  // A recv that loses to a timer is abandoned: the messages go to the recvs after it.
  const [first] = await ctx.select([ctx.recv(), ctx.sleep(10)]);
  await ctx.send(child, { from: ctx.pid, value: 1 });
  await ctx.send(child, { from: ctx.pid, value: 2 });
  const got = [await ctx.recv(), await ctx.recv()];
  const [second, value] = await ctx.select([ctx.sleep(3_600_000), ctx.join(child)]);
  return { first, got, second, value };
}

export async function stuck() {
  await new Promise(() => {});
}

export async function values(ctx, what) {
  if (what === "cycle") {
    const cycle = {};
    cycle.self = cycle;
    return cycle;
  }
  return {
    date: new Date(0),
    custom: { toJSON: () => "custom" },
    map: new Map([[1, 2]]),
    skipped: undefined,
    nan: NaN,
    big: 1e21,
    negative_zero: -0,
    whole: 3,
  };
}

export async function clock(ctx) {
  // The clock is the step's: read once a step, however often the code asks.
  const a = Date.now();
  let spin = 0;
  for (let i = 0; i < 200_000; i++) spin += i;
  const b = new Date().getTime();
  const c = ctx.now();
  await ctx.sleep(20);
  return { same: a === b && b === c && spin > 0, moved: Date.now() - a >= 20 };
}
