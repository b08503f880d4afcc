"""The scenario suite of Python workflows: what host/cli/tests/python.rs runs."""

import datetime
import json
import random
import time
import uuid

import wfhost
from helpers import double


@wfhost.entry
async def greet(ctx, name):
    ctx.info(f"greeting {name}")
    return f"Hello, {name}!"


@wfhost.entry
async def timers(ctx, n):
    # Several timers at once: they end in the order of their lengths, whatever the order made.
    order = []

    async def nap(i):
        await ctx.sleep(0.1 * (n - i))
        order.append(i)
        return i

    values = await wfhost.gather(*[nap(i) for i in range(n)])
    first, _ = await wfhost.select(ctx.sleep(3600), ctx.sleep(0.01))
    return {"values": values, "order": order, "first": first}


@wfhost.entry
async def echo(ctx, n):
    for _ in range(n):
        message = await ctx.recv()
        await ctx.send(message["from"], double(message["value"]))
    return n


@wfhost.entry
async def messages(ctx, n):
    child = await ctx.spawn("echo", n)
    got = []
    for i in range(n):
        await ctx.send(child, {"from": ctx.pid, "value": i})
        got.append(await ctx.recv())
    nothing = await ctx.recv(timeout=0.01)
    await ctx.send(wfhost.HOST, {"got": got})
    return {"got": got, "nothing": nothing, "echoed": await ctx.join(child)}


@wfhost.entry
async def square(ctx, n):
    return n * n


@wfhost.entry
async def fail(ctx, text):
    raise ValueError(text)


@wfhost.entry
async def family(ctx, n):
    children = [await ctx.spawn("square", i) for i in range(n)]
    values = await wfhost.gather(*[ctx.join(child) for child in children])
    bad = await ctx.spawn("fail", "a bad child")
    try:
        await ctx.join(bad)
        caught = None
    except wfhost.CommandError as error:
        caught = error.kind
    return {"values": values, "caught": caught}


@wfhost.entry
async def stubborn(ctx, _):
    try:
        await ctx.sleep(3600)
        return "slept"
    except wfhost.Cancelled:
        # Clean-up still runs commands.
        await ctx.sleep(0.001)
        await ctx.send(wfhost.HOST, "cleaned up")
        raise


@wfhost.entry
async def canceller(ctx, entry):
    child = await ctx.spawn(entry, None)
    await ctx.sleep(0.01)
    await ctx.cancel(child)
    try:
        await ctx.join(child)
    except wfhost.CommandError as error:
        return error.kind
    return "not cancelled"


@wfhost.entry
async def patched(ctx, _):
    return ctx.patched("v2")


@wfhost.entry
async def call(ctx, value):
    return await ctx.call("double", value)


@wfhost.entry
async def reads(ctx, _):
    # The standard library's clocks and randomness, and the context's: a durable host journals
    # what they read, so a workflow started again after a crash reads the same.
    seen = {
        "time": time.time(),
        "now": datetime.datetime.now().isoformat(),
        "random": random.random(),
        "uuid": str(uuid.uuid4()),
        "ctx_random": ctx.random(),
        "ctx_now": ctx.now().isoformat(),
    }
    # Printed at once (a message to the host goes out when the step is journaled).
    print(json.dumps(seen), flush=True)
    await ctx.sleep(0.05)
    return seen


@wfhost.entry
async def forbidden(ctx, what):
    if what == "file":
        with open("/etc/hostname") as f:
            return f.read()
    if what == "socket":
        import socket

        socket.create_connection(("example.com", 80))
    if what == "thread":
        import threading

        threading.Thread(target=print).start()
    if what == "subprocess":
        import subprocess

        subprocess.run(["ls"])
    return "allowed"


@wfhost.entry
async def spin(ctx, _):
    while True:
        pass


@wfhost.entry
async def bomb(ctx, _):
    hoard = []
    while True:
        hoard.append(bytearray(1 << 20))


@wfhost.entry
async def swallow(ctx, _):
    # A retry loop's `except Exception` does not swallow a cancel: it is not an Exception.
    while True:
        try:
            await ctx.sleep(3600)
        except Exception:
            continue


@wfhost.entry
async def abandon(ctx, _):
    async def long():
        try:
            await ctx.sleep(3600)
        finally:
            ctx.info("the abandoned coroutine closed")

    async def short():
        await ctx.sleep(0.01)
        raise ValueError("short failed")

    try:
        await wfhost.gather(long(), short())
    except ValueError as error:
        return str(error)
    return "no failure"


@wfhost.entry
async def misuse(ctx, what):
    if what == "sleep":
        time.sleep(1)
    if what == "twice":

        async def work():
            await ctx.sleep(0.01)
            return 1

        twice = work()
        return await wfhost.gather(twice, twice)
    return "allowed"


@wfhost.entry
async def fetch(ctx, url):
    response = await ctx.http(
        "POST", url, headers=[("x-one", "1"), ("x-two", "2")], body="ping", timeout=30
    )
    headers = dict(response["headers"])
    return {
        "status": response["status"],
        "body": response["body"].decode(),
        "seen": headers.get("x-seen"),
    }


@wfhost.entry
async def counter(ctx, _):
    # Adds up the numbers it is sent until "stop".
    total = 0
    while True:
        message = await ctx.recv()
        if message == "stop":
            break
        total += message
    return total  # v1


@wfhost.entry
async def remind(ctx, days):
    # A day's sleep, a worker's text and a message to the host, `days` times: under the test
    # harness's virtual clock, the language's clock and the context's move with the sleeps.
    start, ctx_start = time.time(), ctx.now()
    for day in range(1, days + 1):
        await ctx.sleep(86_400)
        await ctx.send(wfhost.HOST, await ctx.call("reminder_text", day))
    return {
        "days": round((time.time() - start) / 86_400),
        "ctx_days": round((ctx.now() - ctx_start).total_seconds() / 86_400),
    }
