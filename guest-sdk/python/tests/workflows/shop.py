"""Workflows the client and worker tests start."""

import wfhost


@wfhost.entry
async def echo(ctx, value):
    return value


@wfhost.entry
async def fail(ctx, message):
    raise ValueError(message)


@wfhost.entry
async def wait_message(ctx, seconds):
    """The first message that comes within `seconds`, or None."""
    return await ctx.recv(timeout=seconds)


@wfhost.entry
async def charge(ctx, order):
    """Calls the worker function `payments.charge` with `order`: its answer."""
    return await ctx.call("payments.charge", order)


@wfhost.entry
async def charge_or_say(ctx, order):
    """As `charge`, but a failed call is an answer: `{"error": kind, "message": ...}`."""
    try:
        return await ctx.call("payments.charge", order)
    except wfhost.CommandError as error:
        return {"error": error.kind, "message": str(error)}

