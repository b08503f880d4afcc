// The fan-out of lib.rs in JavaScript, and what the benchmarks of BENCHMARKS.md ("Workflows in
// Python and JavaScript") time beside it: a ping-pong between two workflows, and a workflow that
// waits.

export async function fanout(ctx, { children, piece }) {
  const spawns = Array.from({ length: children }, (_, i) => ctx.spawn("piece", [i * piece, piece]));
  const pids = await Promise.all(spawns);
  const pieces = await Promise.all(pids.map((pid) => ctx.join(pid)));
  return { children, total: pieces.reduce((a, b) => a + b, 0) };
}

export async function piece(ctx, [start, length]) {
  let sum = 0;
  for (let n = start; n < start + length; n++) sum += n;
  return sum;
}

/** `n` round trips with a child: a message each way. */
export async function pingpong(ctx, n) {
  const child = await ctx.spawn("pong", n);
  for (let i = 0; i < n; i++) {
    await ctx.send(child, i);
    await ctx.recv();
  }
  return await ctx.join(child);
}

export async function pong(ctx, n) {
  for (let i = 0; i < n; i++) {
    const value = await ctx.recv();
    await ctx.send(ctx.parent, value);
  }
  return n;
}

/** Waits for one message: what a waiting workflow costs. */
export async function wait(ctx) {
  return await ctx.recv();
}

export async function greet(ctx, name) {
  return `Hello, ${name}!`;
}
