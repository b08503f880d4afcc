// The workflows the client's tests start. Built once per test run into a module with
// `wfhost build test/workflows/shop.js`; each entry point is one behaviour a test checks.

/** Answers its input as it came. */
export async function echo(ctx, input) {
  return input;
}

/** Fails with the message its input gives (default "out of stock"). */
export async function fail(ctx, input) {
  throw new RangeError(input?.message ?? "out of stock");
}

/** Waits up to ten minutes for a message and answers `{ got: message }`. */
export async function wait_for_message(ctx, input) {
  const message = await ctx.recv({ timeout: 600_000 });
  return { got: message === undefined ? null : message };
}

/** Charges a payment through the worker function `payments.charge`: its answer. A refusal of
 * the call (a rejected or failed charge) fails the workflow with the call's error. */
export async function checkout(ctx, order) {
  const receipt = await ctx.call("payments.charge", order);
  return { order: order.id, receipt };
}

/** Sends the host one message per item of its input, then answers how many it sent. */
export async function announce(ctx, items) {
  for (const item of items) await ctx.send(0, item);
  return items.length;
}

/** Takes `steps` short sleeps, so that its history has several steps. */
export async function tick(ctx, { steps }) {
  for (let i = 0; i < steps; i++) await ctx.sleep(1);
  return steps;
}
