"""An order saga in Python, as examples/order is in Rust: reserve stock, charge the payment,
ship. Each step is a child workflow (an "activity" entry point); when a step fails, the steps
already done are compensated in reverse order. `fail_at` ("reserve", "charge" or "ship") makes
one step fail, to show the compensating path.

`reserve_stock` calls the function `inventory.reserve` when the host serves one (a worker, or
the embedding application), and simulates the reservation otherwise.
"""

import wfhost

STEPS = [
    ("reserve", "reserve_stock", "release_stock"),
    ("charge", "charge_payment", "refund_payment"),
    ("ship", "ship_order", None),
]


@wfhost.entry
async def place_order(ctx, order):
    log = []
    compensations = []
    for step, activity, compensation in STEPS:
        child = await ctx.spawn(activity, {"order": order, "fail": order.get("fail_at") == step})
        try:
            receipt = await ctx.join(child)
        except wfhost.CommandError as error:
            if error.kind != "child-failed":
                raise
            log.append(f"{activity}: failed")
            ctx.warn(f"order {order['id']}: {activity} failed; compensating")
            for undo in reversed(compensations):
                child = await ctx.spawn(undo, {"order": order, "fail": False})
                log.append(f"{undo}: {await ctx.join(child)}")
            return {"order": order["id"], "status": "compensated", "log": log}
        log.append(f"{activity}: {receipt}")
        if compensation:
            compensations.append(compensation)
    return {"order": order["id"], "status": "completed", "log": log}


@wfhost.entry
async def reserve_stock(ctx, activity):
    order = activity["order"]
    if activity["fail"]:
        raise RuntimeError(f"no stock of {order['sku']}")
    request = {"sku": order["sku"], "quantity": order["quantity"]}
    try:
        reservation = await ctx.call("inventory.reserve", request)
    except wfhost.CommandError as error:
        if error.kind not in ("unknown-command", "not-allowed"):
            raise
        ctx.info("no inventory service for this workflow; simulating the reservation")
        return f"reserved {order['quantity']} (simulated)"
    return f"reserved {order['quantity']} ({reservation})"


@wfhost.entry
async def release_stock(ctx, activity):
    order = activity["order"]
    ctx.info(f"releasing {order['quantity']} of {order['sku']}")
    return f"released {order['quantity']}"


@wfhost.entry
async def charge_payment(ctx, activity):
    await ctx.sleep(0.02)
    if activity["fail"]:
        raise RuntimeError("card declined")
    return f"charged {activity['order']['amount_cents']} cents"


@wfhost.entry
async def refund_payment(ctx, activity):
    await ctx.sleep(0.01)
    return f"refunded {activity['order']['amount_cents']} cents"


@wfhost.entry
async def ship_order(ctx, activity):
    if activity["fail"]:
        raise RuntimeError("carrier unavailable")
    return f"shipped {activity['order']['id']}"


@wfhost.entry
async def hold_order(ctx, order):
    """Holds an order until a message says "confirm" ("confirmed") or a minute passes
    ("expired"); a cancel releases the hold ("released")."""
    ctx.info(f"holding order {order['id']}")
    await ctx.send(wfhost.HOST, f"holding {order['id']}")
    try:
        word = await ctx.recv(timeout=60)
    except wfhost.Cancelled:
        ctx.info(f"releasing the hold on order {order['id']}")
        return "released"
    if word is None:
        return "expired"
    if word == "confirm":
        return "confirmed"
    raise ValueError(f"unexpected message {word!r}")
