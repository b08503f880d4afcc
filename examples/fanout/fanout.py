"""The fan-out of lib.rs in Python, and what the benchmarks of BENCHMARKS.md ("Workflows in
Python and JavaScript") time beside it: a ping-pong between two workflows, and a workflow that
waits."""

import wfhost


@wfhost.entry
async def fanout(ctx, plan):
    spawns = [ctx.spawn("piece", [i * plan["piece"], plan["piece"]]) for i in range(plan["children"])]
    children = await wfhost.gather(*spawns)
    pieces = await wfhost.gather(*[ctx.join(child) for child in children])
    return {"children": plan["children"], "total": sum(pieces)}


@wfhost.entry
async def piece(ctx, span):
    start, length = span
    return sum(range(start, start + length))


@wfhost.entry
async def pingpong(ctx, n):
    """`n` round trips with a child: a message each way."""
    child = await ctx.spawn("pong", n)
    for i in range(n):
        await ctx.send(child, i)
        await ctx.recv()
    return await ctx.join(child)


@wfhost.entry
async def pong(ctx, n):
    for _ in range(n):
        value = await ctx.recv()
        await ctx.send(ctx.parent, value)
    return n


@wfhost.entry
async def wait(ctx, _):
    """Waits for one message: what a waiting workflow costs."""
    return await ctx.recv()


@wfhost.entry
async def greet(ctx, name):
    return f"Hello, {name}!"
