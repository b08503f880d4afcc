// An order saga in JavaScript, as examples/order is in Rust: reserve stock, charge the payment,
// ship. Each step is a child workflow (an "activity" entry point); when a step fails, the steps
// already done are compensated in reverse order. `fail_at` ("reserve", "charge" or "ship") makes
// one step fail, to show the compensating path.
//
// `reserve_stock` calls the function `inventory.reserve` when the host serves one (a worker, or
// the embedding application), and simulates the reservation otherwise.

import { HOST, Cancelled, CommandError } from "wfhost";

const STEPS = [
  ["reserve", "reserve_stock", "release_stock"],
  ["charge", "charge_payment", "refund_payment"],
  ["ship", "ship_order", null],
];

export async function place_order(ctx, order) {
  const log = [];
  const compensations = [];
  for (const [step, activity, compensation] of STEPS) {
    const child = await ctx.spawn(activity, { order, fail: order.fail_at === step });
    let receipt;
    try {
      receipt = await ctx.join(child);
    } catch (error) {
      if (!(error instanceof CommandError) || error.kind !== "child-failed") throw error;
      log.push(`${activity}: failed`);
      ctx.warn(`order ${order.id}: ${activity} failed; compensating`);
      for (const undo of compensations.reverse()) {
        const child = await ctx.spawn(undo, { order, fail: false });
        log.push(`${undo}: ${await ctx.join(child)}`);
      }
      return { order: order.id, status: "compensated", log };
    }
    log.push(`${activity}: ${receipt}`);
    if (compensation) compensations.push(compensation);
  }
  return { order: order.id, status: "completed", log };
}

export async function reserve_stock(ctx, { order, fail }) {
  if (fail) throw new Error(`no stock of ${order.sku}`);
  const request = { sku: order.sku, quantity: order.quantity };
  let reservation;
  try {
    reservation = await ctx.call("inventory.reserve", request);
  } catch (error) {
    if (!(error instanceof CommandError) || !["unknown-command", "not-allowed"].includes(error.kind)) {
      throw error;
    }
    ctx.info("no inventory service for this workflow; simulating the reservation");
    return `reserved ${order.quantity} (simulated)`;
  }
  return `reserved ${order.quantity} (${reservation})`;
}

export async function release_stock(ctx, { order }) {
  ctx.info(`releasing ${order.quantity} of ${order.sku}`);
  return `released ${order.quantity}`;
}

export async function charge_payment(ctx, { order, fail }) {
  await ctx.sleep(20);
  if (fail) throw new Error("card declined");
  return `charged ${order.amount_cents} cents`;
}

export async function refund_payment(ctx, { order }) {
  await ctx.sleep(10);
  return `refunded ${order.amount_cents} cents`;
}

export async function ship_order(ctx, { order, fail }) {
  if (fail) throw new Error("carrier unavailable");
  return `shipped ${order.id}`;
}

/** Holds an order until a message says "confirm" ("confirmed") or a minute passes ("expired");
 * a cancel releases the hold ("released"). */
export async function hold_order(ctx, order) {
  ctx.info(`holding order ${order.id}`);
  await ctx.send(HOST, `holding ${order.id}`);
  let word;
  try {
    word = await ctx.recv({ timeout: 60_000 });
  } catch (error) {
    if (!(error instanceof Cancelled)) throw error;
    ctx.info(`releasing the hold on order ${order.id}`);
    return "released";
  }
  if (word === undefined) return "expired";
  if (word === "confirm") return "confirmed";
  throw new Error(`unexpected message ${JSON.stringify(word)}`);
}
