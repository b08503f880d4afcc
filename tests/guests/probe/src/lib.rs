//! A test guest: one entry point per behaviour the host must handle.

use std::io::Read;
use std::time::Duration;

use serde_json::{json, Value};
use wfguest::{Ctx, Error};

/// Returns its input.
pub async fn echo(_ctx: Ctx, value: Value) -> Result<Value, Error> {
    Ok(value)
}

/// Fails with the given message.
pub async fn fail(_ctx: Ctx, message: String) -> Result<(), Error> {
    Err(Error::msg(message))
}

/// Panics with the given message.
pub async fn panic(_ctx: Ctx, message: String) -> Result<(), Error> {
    panic!("{message}")
}

/// Never returns from its first step.
pub async fn spin(_ctx: Ctx, _: ()) -> Result<(), Error> {
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

/// Allocates and touches `mib` MiB.
pub async fn hog(_ctx: Ctx, mib: usize) -> Result<usize, Error> {
    let block = vec![1u8; mib << 20];
    Ok(block.iter().map(|b| usize::from(*b)).sum::<usize>() >> 20)
}

/// Prints each line to stdout, then "done" to stderr.
pub async fn print(_ctx: Ctx, lines: Vec<String>) -> Result<usize, Error> {
    for line in &lines {
        println!("{line}");
    }
    eprintln!("done");
    Ok(lines.len())
}

/// Prints `first`, sleeps `millis`, prints `second`; returns both.
pub async fn print_around_sleep(
    ctx: Ctx,
    (first, millis, second): (String, u64, String),
) -> Result<(String, String), Error> {
    println!("{first}");
    ctx.sleep(Duration::from_millis(millis)).await?;
    println!("{second}");
    Ok((first, second))
}

/// Exits the whole instance with `code`.
pub async fn exit(_ctx: Ctx, code: i32) -> Result<(), Error> {
    std::process::exit(code)
}

/// Reports what WASI lets it see: it should see nothing.
pub async fn sandbox(_ctx: Ctx, _: ()) -> Result<Value, Error> {
    let mut stdin = Vec::new();
    let stdin_read = std::io::stdin().read_to_end(&mut stdin).is_ok();
    Ok(json!({
        "args": std::env::args().count(),
        "vars": std::env::vars().count(),
        "read_root": std::fs::read_dir("/").is_ok(),
        "open_file": std::fs::File::open("Cargo.toml").is_ok(),
        "create_file": std::fs::File::create("/tmp/escape").is_ok(),
        "stdin_bytes": if stdin_read { stdin.len() as i64 } else { -1 },
    }))
}

/// Starts `n` one-millisecond sleeps at once, then waits for all of them.
pub async fn sleepy(ctx: Ctx, n: u32) -> Result<u32, Error> {
    let sleeps: Vec<_> = (0..n)
        .map(|_| ctx.sleep(Duration::from_millis(1)))
        .collect();
    for sleep in sleeps {
        sleep.await?;
    }
    Ok(n)
}

/// Calls a host function nobody registered; returns the error's kind and message.
pub async fn unknown_command(ctx: Ctx, _: ()) -> Result<Value, Error> {
    match ctx.call::<_, Value>("no.such.command", &()).await {
        Ok(value) => Ok(json!({ "unexpected": value })),
        Err(error) => Ok(json!({
            "kind": error.kind().map(|k| k.name()),
            "message": error.to_string(),
        })),
    }
}

/// Answers every message by sending it back to its sender, forever (until cancelled).
pub async fn relay(ctx: Ctx, _: ()) -> Result<(), Error> {
    loop {
        let message = ctx.recv_message().await?;
        // Not awaited: the acknowledgement is of no interest, so the process stays idle.
        drop(ctx.send_payload(message.from, message.data));
    }
}

/// Sleeps `millis`, then waits for a message; returns it with how long it slept.
pub async fn nap_then_message(ctx: Ctx, millis: u64) -> Result<String, Error> {
    ctx.sleep(Duration::from_millis(millis)).await?;
    let message: String = ctx.recv().await?;
    Ok(format!("{message} after {millis} ms"))
}

/// Spawns a chain of workflows `depth` deep below this one (each the child of the one before)
/// and returns `depth` once the deepest has ended.
pub async fn nest(ctx: Ctx, depth: u32) -> Result<u32, Error> {
    if depth == 0 {
        return Ok(0);
    }
    let child = ctx.spawn("nest", &(depth - 1)).await?;
    Ok(ctx.join::<u32>(child).await? + 1)
}

/// Spawns a collector, sends it `count` numbered messages, and returns what it collected.
pub async fn ordered(ctx: Ctx, count: u32) -> Result<Vec<u32>, Error> {
    let collector = ctx.spawn("collect", &count).await?;
    for n in 0..count {
        ctx.send(collector, &n).await?;
    }
    ctx.join(collector).await
}

/// Receives `count` messages and returns them in arrival order.
pub async fn collect(ctx: Ctx, count: u32) -> Result<Vec<u32>, Error> {
    let mut seen = Vec::new();
    while seen.len() < count as usize {
        seen.push(ctx.recv().await?);
    }
    Ok(seen)
}

/// Sends to `pid` and reports the error, if any.
pub async fn send_to(ctx: Ctx, pid: u64) -> Result<Value, Error> {
    Ok(match ctx.send(wfguest::Pid(pid), &"hello").await {
        Ok(()) => json!("sent"),
        Err(error) => {
            json!({ "kind": error.kind().map(|k| k.name()), "message": error.to_string() })
        }
    })
}

/// Waits up to `millis` for a message; `null` when none came.
pub async fn wait_message(ctx: Ctx, millis: u64) -> Result<Option<String>, Error> {
    ctx.recv_timeout(Duration::from_millis(millis)).await
}

/// Spawns `entry` (of `module`, if given) with `input`, joins it, and reports the outcome as a
/// value: `{"ok": result}` or `{"error": kind, "message": text}`.
pub async fn supervise(
    ctx: Ctx,
    (module, entry, input): (Option<String>, String, Value),
) -> Result<Value, Error> {
    let spawned = match &module {
        Some(module) => ctx.spawn_module(module, &entry, &input).await,
        None => ctx.spawn(&entry, &input).await,
    };
    let child = match spawned {
        Ok(child) => child,
        Err(error) => return Ok(outcome_error(&error)),
    };
    Ok(match ctx.join::<Value>(child).await {
        Ok(result) => json!({ "ok": result }),
        Err(error) => outcome_error(&error),
    })
}

fn outcome_error(error: &Error) -> Value {
    json!({ "error": error.kind().map(|k| k.name()), "message": error.to_string() })
}

/// A child for `supervise`: returns the length of its input's JSON text, or fails on "fail".
pub async fn measure(_ctx: Ctx, value: Value) -> Result<usize, Error> {
    match value {
        Value::String(s) if s == "fail" => Err(Error::msg("asked to fail")),
        other => Ok(other.to_string().len()),
    }
}

/// Waits for messages until cancelled, then cleans up (a log and a short sleep) and says so.
pub async fn cleanup_on_cancel(ctx: Ctx, _: ()) -> Result<String, Error> {
    ctx.info("waiting for messages");
    loop {
        match ctx.recv::<Value>().await {
            Ok(_) => continue,
            Err(Error::Cancelled) => {
                ctx.info("cleanup ran");
                ctx.sleep(Duration::from_millis(10)).await?;
                return Ok("cleaned up".into());
            }
            Err(other) => return Err(other),
        }
    }
}

/// Ignores cancels: keeps waiting for messages whatever happens.
pub async fn stubborn(ctx: Ctx, _: ()) -> Result<(), Error> {
    ctx.info("not stopping");
    loop {
        let _ = ctx.recv::<Value>().await;
    }
}

/// Handles each message slowly (a 50 ms sleep each) until cancelled; returns how many it handled.
pub async fn slow_consumer(ctx: Ctx, _: ()) -> Result<u32, Error> {
    let mut handled = 0;
    loop {
        match ctx.recv::<Value>().await {
            Ok(_) => {}
            Err(Error::Cancelled) => return Ok(handled),
            Err(other) => return Err(other),
        }
        match ctx.sleep(Duration::from_millis(50)).await {
            Ok(()) => handled += 1,
            Err(Error::Cancelled) => return Ok(handled),
            Err(other) => return Err(other),
        }
    }
}

/// Spawns a `cleanup_on_cancel` child, cancels it, and returns what it answered.
pub async fn cancel_child(ctx: Ctx, _: ()) -> Result<String, Error> {
    let child = ctx.spawn("cleanup_on_cancel", &()).await?;
    ctx.cancel(child).await?;
    ctx.join(child).await
}

/// Cancels a pid that does not exist; reports the error kind.
pub async fn cancel_unknown(ctx: Ctx, pid: u64) -> Result<Value, Error> {
    Ok(match ctx.cancel(wfguest::Pid(pid)).await {
        Ok(()) => json!("cancelled"),
        Err(error) => outcome_error(&error),
    })
}

/// Calls host function `name` with `input`; reports `{"ok": ...}` or the error.
pub async fn call(ctx: Ctx, (name, input): (String, Value)) -> Result<Value, Error> {
    Ok(match ctx.call::<_, Value>(&name, &input).await {
        Ok(result) => json!({ "ok": result }),
        Err(error) => outcome_error(&error),
    })
}

/// Calls host function `name` with a string of `len` bytes; reports the outcome as `call` does.
pub async fn call_sized(ctx: Ctx, (name, len): (String, usize)) -> Result<Value, Error> {
    call(ctx, (name, Value::String("y".repeat(len)))).await
}

/// Asks the host for the time and two random numbers.
pub async fn time_and_chance(ctx: Ctx, _: ()) -> Result<Value, Error> {
    let now = ctx.now().await?;
    let (a, b) = (ctx.random().await?, ctx.random().await?);
    let since_epoch = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(Error::msg)?;
    Ok(json!({ "unix_seconds": since_epoch.as_secs(), "randoms_differ": a != b }))
}

/// Spawns waiting children until the host refuses one (or `most` are running); reports how many
/// it got and the refusal.
pub async fn fork(ctx: Ctx, most: u32) -> Result<Value, Error> {
    let mut children = 0;
    while children < most {
        match ctx.spawn("stubborn", &()).await {
            Ok(_) => children += 1,
            Err(error) => {
                return Ok(json!({ "children": children, "refused": outcome_error(&error) }))
            }
        }
    }
    Ok(json!({ "children": children }))
}

/// A hand-written machine that spends its start (inside `init`, before it has taken a single event)
/// busy for the given milliseconds, then idles.
#[derive(Debug)]
pub struct SlowStart;

impl wfguest::Machine for SlowStart {
    type Input = u64;

    fn start(_: &wfguest::StartInfo, millis: u64) -> Result<Self, String> {
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_millis(millis) {
            std::hint::spin_loop();
        }
        Ok(SlowStart)
    }

    fn step(&mut self, _: Vec<wfguest::Event>, out: &mut wfguest::StepOutput) {
        out.status = wfguest::Status::Idle;
    }
}

/// Sends `count` messages to a child still busy starting, which takes none of them meanwhile;
/// reports how many went through and the refusal.
pub async fn flood(ctx: Ctx, count: u32) -> Result<Value, Error> {
    let sink = ctx.spawn("slow_start", &2_000u64).await?;
    for sent in 0..count {
        if let Err(error) = ctx.send(sink, &sent).await {
            return Ok(json!({ "sent": sent, "refused": outcome_error(&error) }));
        }
    }
    Ok(json!({ "sent": count }))
}

/// Logs `lines` lines in a single step.
pub async fn chatter(ctx: Ctx, lines: u32) -> Result<u32, Error> {
    for n in 0..lines {
        ctx.log_with(wfguest::Level::Trace, "chatter", &[("n", &n)]);
    }
    Ok(lines)
}

/// Sleeps the wrong way: with the thread, not with the host's timer.
pub async fn thread_sleep(_ctx: Ctx, millis: u64) -> Result<(), Error> {
    std::thread::sleep(Duration::from_millis(millis));
    Ok(())
}

/// A spawn bomb: spawns children until the host refuses one, and fails with the refusal.
pub async fn bomb(ctx: Ctx, _: ()) -> Result<(), Error> {
    loop {
        ctx.spawn("echo", &()).await?;
    }
}

/// A message flood: sends to a child busy starting until the host refuses, and fails with it.
pub async fn deluge(ctx: Ctx, _: ()) -> Result<(), Error> {
    let sink = ctx.spawn("slow_start", &10_000u64).await?;
    let mut n: u64 = 0;
    loop {
        ctx.send(sink, &n).await?;
        n += 1;
    }
}

/// Recurses without end.
pub async fn recurse(_ctx: Ctx, _: ()) -> Result<u64, Error> {
    fn down(n: u64) -> u64 {
        if n == u64::MAX {
            return 0;
        }
        let mut frame = [n; 16];
        std::hint::black_box(&mut frame);
        frame[15].wrapping_add(down(frame[0] + 1))
    }
    Ok(down(0))
}

/// Finishes with a string of `mib` MiB.
pub async fn big_result(_ctx: Ctx, mib: usize) -> Result<String, Error> {
    Ok("x".repeat(mib << 20))
}

/// Calls host function `name`, failing if the call fails.
pub async fn strict_call(ctx: Ctx, name: String) -> Result<Value, Error> {
    ctx.call(&name, &()).await
}

/// Closes its stdout (a WASI `fd_close(1)`), then reports whether descriptor 1 is still open.
pub async fn close_stdout(_ctx: Ctx, _: ()) -> Result<Value, Error> {
    use std::os::fd::FromRawFd;
    // SAFETY: descriptor 1 is stdout, which this process owns; dropping the `File` closes it,
    // which is what this entry point is for.
    drop(unsafe { std::fs::File::from_raw_fd(1) });
    // SAFETY: as above; this one is not dropped, so it closes nothing.
    let again = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(1) });
    Ok(json!({ "open": again.metadata().is_ok() }))
}

/// Sends messages of `size` bytes to `target` as fast as it can, until a send is refused; reports
/// how many went and the refusal.
pub async fn flooder(ctx: Ctx, (target, size): (u64, usize)) -> Result<Value, Error> {
    let message = "z".repeat(size);
    let mut sent: u64 = 0;
    loop {
        if let Err(error) = ctx.send(wfguest::Pid(target), &message).await {
            return Ok(json!({ "sent": sent, "refused": outcome_error(&error) }));
        }
        sent += 1;
    }
}

/// The victim of a flood: starts a `flooder` at itself with messages of `size` bytes, then waits
/// (a `sleep` of `millis`, or a call to host function `gate` when `millis` is zero), then joins
/// the flooder, and only then receives everything it was sent. Reports the flooder's outcome and
/// what it received.
pub async fn flood_victim(ctx: Ctx, (size, millis): (usize, u64)) -> Result<Value, Error> {
    let flooder = ctx.spawn("flooder", &(ctx.pid().0, size)).await?;
    if millis > 0 {
        ctx.sleep(Duration::from_millis(millis)).await?;
    } else {
        ctx.call::<_, Value>("gate", &()).await?;
    }
    let flood: Value = ctx.join(flooder).await?;
    let sent = flood["sent"].as_u64().unwrap_or(0);
    let mut bytes = 0;
    for _ in 0..sent {
        let message: String = ctx.recv().await?;
        bytes += message.len();
    }
    Ok(json!({ "flood": flood, "received": sent, "bytes": bytes }))
}

/// Burns `millis` of CPU per step, for ever: each round ends with a `now`, which comes straight
/// back.
pub async fn hog_loop(ctx: Ctx, millis: u64) -> Result<(), Error> {
    loop {
        let start = std::time::Instant::now();
        let mut n: u64 = 0;
        while start.elapsed() < Duration::from_millis(millis) {
            n = std::hint::black_box(n.wrapping_add(1));
        }
        ctx.now().await?;
    }
}

/// Starts `hogs` children that each burn 250 ms of CPU per step for ever, and `naps` children
/// that each sleep 100 ms; joins the nappers, cancels the hogs, and reports how many napped.
pub async fn crowd(ctx: Ctx, (hogs, naps): (u32, u32)) -> Result<u32, Error> {
    let mut hogging = Vec::new();
    for _ in 0..hogs {
        hogging.push(ctx.spawn("hog_loop", &250u64).await?);
    }
    let mut nappers = Vec::new();
    for _ in 0..naps {
        nappers.push(ctx.spawn("nap", &100u64).await?);
    }
    let mut rested = 0;
    for napper in nappers {
        if ctx.join::<String>(napper).await? == "rested" {
            rested += 1;
        }
    }
    for hog in hogging {
        ctx.cancel(hog).await?;
    }
    Ok(rested)
}

/// Calls host function `name`, then spins for ever in its next step.
pub async fn call_then_spin(ctx: Ctx, name: String) -> Result<(), Error> {
    ctx.call::<_, Value>(&name, &()).await?;
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

/// Sleeps `millis`, then answers "rested".
pub async fn nap(ctx: Ctx, millis: u64) -> Result<String, Error> {
    ctx.sleep(Duration::from_millis(millis)).await?;
    Ok("rested".into())
}

/// Joins a child napping `millis` inside a race with a 20 ms sleep, which wins; then joins the
/// same child again. The first join was abandoned: the second must still get the result.
pub async fn impatient_join(ctx: Ctx, millis: u64) -> Result<Value, Error> {
    use futures::FutureExt;
    let child = ctx.spawn("nap", &millis).await?;
    // Biased to the sleep: should both be ready at once (a slow host), the join is still the one
    // abandoned.
    let first = futures::select_biased! {
        _ = ctx.sleep(Duration::from_millis(20)).fuse() => json!("timed out"),
        result = ctx.join::<String>(child).fuse() => json!({ "joined": result.ok() }),
    };
    let second: String = ctx.join(child).await?;
    Ok(json!({ "first": first, "second": second }))
}

/// The standard combinators over the SDK's futures: `join_all` over joins of `n` children,
/// `select` over two sleeps, and `FuturesUnordered` over sleeps of different lengths, which
/// finish shortest first.
pub async fn combinators(ctx: Ctx, n: u32) -> Result<Value, Error> {
    use futures::stream::{FuturesUnordered, StreamExt};
    use futures::FutureExt;
    let mut children = Vec::new();
    for i in 0..n {
        children.push(ctx.spawn("measure", &"x".repeat(i as usize)).await?);
    }
    let lengths: Vec<usize> = futures::future::join_all(children.iter().map(|c| ctx.join(*c)))
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    let winner = futures::select! {
        _ = ctx.sleep(Duration::from_millis(5)).fuse() => "short",
        _ = ctx.sleep(Duration::from_secs(3600)).fuse() => "long",
    };
    let mut naps: FuturesUnordered<_> = [30u64, 10, 20]
        .into_iter()
        .map(|millis| {
            ctx.sleep(Duration::from_millis(millis))
                .map(move |r| r.map(|()| millis))
        })
        .collect();
    let mut order = Vec::new();
    while let Some(millis) = naps.next().await {
        order.push(millis?);
    }
    Ok(json!({ "lengths": lengths, "winner": winner, "order": order }))
}

/// Receives `count` messages as `u32`: counts the ones that decode and the ones that do not,
/// with the first bad sender; then, with `recv_valid`, the next good one.
pub async fn typed_messages(ctx: Ctx, count: u32) -> Result<Value, Error> {
    let (mut good, mut bad, mut first_bad) = (Vec::new(), 0, None);
    for _ in 0..count {
        match ctx.recv::<u32>().await {
            Ok(n) => good.push(n),
            Err(Error::Undecodable(message)) => {
                bad += 1;
                first_bad.get_or_insert(message.from.0);
            }
            Err(other) => return Err(other),
        }
    }
    let valid: u32 = ctx.recv_valid().await?;
    Ok(json!({ "good": good, "bad": bad, "first_bad": first_bad, "valid": valid }))
}

/// Receives one `u32` with `?`: a message of another type fails the workflow.
pub async fn strict_recv(ctx: Ctx, _: ()) -> Result<u32, Error> {
    ctx.recv().await
}

/// Sleeps until `millis` after the host's present time, then reports whether the host's clock had
/// got there.
pub async fn alarm(ctx: Ctx, millis: u64) -> Result<bool, Error> {
    let deadline = ctx.now().await? + Duration::from_millis(millis);
    ctx.sleep_until(deadline).await?;
    Ok(ctx.now().await? >= deadline)
}

/// Sends `n` numbered messages to the host, then has a child send one more; returns `n`.
pub async fn report(ctx: Ctx, n: u32) -> Result<u32, Error> {
    for i in 0..n {
        ctx.send(wfguest::Pid::HOST, &format!("progress {i}"))
            .await?;
    }
    let child = ctx.spawn("report_once", &()).await?;
    ctx.join::<()>(child).await?;
    Ok(n)
}

/// Reports `n` times as `report` does, then waits for a message, which it returns.
pub async fn report_then_wait(ctx: Ctx, n: u32) -> Result<String, Error> {
    report(ctx.clone(), n).await?;
    ctx.recv().await
}

/// The version of this code: "1" as built. A test makes the other versions by changing the last
/// byte of this string in the module's data; the read is volatile so that the compiler cannot
/// fold it away.
static VERSION: [u8; 17] = *b"wfprobe-version:1";

fn version() -> u8 {
    // SAFETY: a read of a byte of a static, which lives as long as the module.
    unsafe { core::ptr::read_volatile(&VERSION[16]) }
}

/// Waits for two numbers as messages and returns what its version of the code makes of them.
/// Version 1: their sum. Version 2 changes what follows the first message behind the patch
/// "double" (it tells the host, and doubles the sum), and keeps version 1's code for histories
/// recorded before. Version 3 changes it without a patch (it naps first): a history version 1
/// recorded past the first message does not replay with it.
pub async fn versioned(ctx: Ctx, _: ()) -> Result<String, Error> {
    let a: u64 = ctx.recv().await?;
    match version() {
        b'1' => {
            let b: u64 = ctx.recv().await?;
            Ok(format!("v1 {}", a + b))
        }
        b'2' => {
            if ctx.patched("double") {
                ctx.send(wfguest::Pid::HOST, "doubling").await?;
                let b: u64 = ctx.recv().await?;
                Ok(format!("v2 patched {}", 2 * (a + b)))
            } else {
                let b: u64 = ctx.recv().await?;
                Ok(format!("v2 unpatched {}", a + b))
            }
        }
        _ => {
            ctx.sleep(Duration::from_millis(1)).await?;
            let b: u64 = ctx.recv().await?;
            Ok(format!("v3 {}", a + b))
        }
    }
}

/// Waits for a number `n`, then spawns `n` children of its own module one after another (as
/// [`chain`]): a workflow whose module must still be there when it wakes.
pub async fn wait_then_chain(ctx: Ctx, _: ()) -> Result<u64, Error> {
    let n: u32 = ctx.recv().await?;
    chain(ctx, n).await
}

/// Sends one message to the host.
pub async fn report_once(ctx: Ctx, _: ()) -> Result<(), Error> {
    ctx.send(wfguest::Pid::HOST, "from a child").await
}

/// Spawns `n` children one after another, each joined before the next is spawned (each child
/// echoes its number); returns the sum of what they returned.
pub async fn chain(ctx: Ctx, n: u32) -> Result<u64, Error> {
    let mut sum = 0;
    for i in 0..n {
        let child = ctx.spawn("echo", &u64::from(i)).await?;
        sum += ctx.join::<u64>(child).await?;
    }
    Ok(sum)
}

/// Spawns `n` children in one go (all the spawns are yielded before any is awaited), then counts
/// the pids it got.
pub async fn spawn_many(ctx: Ctx, n: u32) -> Result<u32, Error> {
    let spawns: Vec<_> = (0..n).map(|_| ctx.spawn("echo", &())).collect();
    let mut got = 0;
    for spawn in spawns {
        spawn.await?;
        got += 1;
    }
    Ok(got)
}

/// Spawns a child that naps for a minute, cancels it, and reports how its join ended.
pub async fn cancel_sleeper(ctx: Ctx, _: ()) -> Result<Value, Error> {
    let child = ctx.spawn("nap", &60_000u64).await?;
    ctx.cancel(child).await?;
    Ok(match ctx.join::<String>(child).await {
        Ok(result) => json!({ "ok": result }),
        Err(error) => outcome_error(&error),
    })
}

/// Calls host function `name` with `input` `n` times at once; reports each outcome in order.
pub async fn calls(ctx: Ctx, (name, n): (String, u32)) -> Result<Vec<Value>, Error> {
    let calls: Vec<_> = (0..n).map(|i| ctx.call::<_, Value>(&name, &i)).collect();
    let mut outcomes = Vec::new();
    for call in calls {
        outcomes.push(match call.await {
            Ok(result) => json!({ "ok": result }),
            Err(error) => outcome_error(&error),
        });
    }
    Ok(outcomes)
}

/// A mix for crash tests: a `HashMap` (seeded from WASI's `random_get`), `now` and `random`,
/// `n` children it exchanges messages with and joins, each running a saga of child activities,
/// and sleeps. Its result depends only on `n`; `extra` counts messages that came more than once.
pub async fn durable_mix(ctx: Ctx, n: u32) -> Result<Value, Error> {
    let mut seen = std::collections::HashMap::new();
    let started = ctx.now().await?;
    let (a, b) = (ctx.random().await?, ctx.random().await?);
    let parent = ctx.pid().0;
    let mut children = Vec::new();
    for i in 0..n {
        children.push(ctx.spawn("durable_child", &(parent, i)).await?);
    }
    let mut sum = 0u64;
    for _ in 0..n {
        let (from, value): (u64, u64) = ctx.recv().await?;
        sum += value;
        seen.insert(from, value);
        ctx.send(wfguest::Pid(from), &(value + 1)).await?;
        ctx.sleep(Duration::from_millis(2)).await?;
    }
    let (mut answers, mut sagas, mut extra) = (0u64, Vec::new(), 0u64);
    for child in children {
        let (answer, saga, more): (u64, String, u64) = ctx.join(child).await?;
        answers += answer;
        sagas.push(saga);
        extra += more;
    }
    while ctx
        .recv_timeout::<Value>(Duration::from_millis(20))
        .await?
        .is_some()
    {
        extra += 1;
    }
    let later = ctx.now().await?;
    Ok(json!({
        "sum": sum,
        "joined": answers,
        "sagas": sagas,
        "extra": extra,
        "distinct": seen.len(),
        "clock_forward": later >= started,
        "randoms_differ": a != b,
    }))
}

/// A child of `durable_mix`: runs a saga of activities (child workflows), sends `i * i` to its
/// parent, returns the parent's answer, the saga's outcome, and how many messages came after it.
pub async fn durable_child(ctx: Ctx, (parent, i): (u64, u32)) -> Result<(u64, String, u64), Error> {
    ctx.sleep(Duration::from_millis(u64::from(i % 3))).await?;
    let saga = child_saga(&ctx, i).await?;
    let me = ctx.pid().0;
    ctx.send(wfguest::Pid(parent), &(me, u64::from(i * i)))
        .await?;
    let answer: u64 = ctx.recv().await?;
    let mut extra = 0;
    while ctx
        .recv_timeout::<Value>(Duration::from_millis(5))
        .await?
        .is_some()
    {
        extra += 1;
    }
    Ok((answer, saga, extra))
}

/// Three activities in turn; child 3 (and every fourth after it) fails its last one, and the
/// saga undoes the others in reverse order.
async fn child_saga(ctx: &Ctx, i: u32) -> Result<String, Error> {
    let mut done = Vec::new();
    for step in ["reserve", "charge", "ship"] {
        let fails = step == "ship" && i % 4 == 3;
        let activity = ctx.spawn("durable_activity", &(step, i, fails)).await?;
        match ctx.join::<String>(activity).await {
            Ok(receipt) => done.push(receipt),
            Err(_) => {
                let mut undone = Vec::new();
                for receipt in done.iter().rev() {
                    let undo = ctx.spawn("durable_activity", &(receipt, i, false)).await?;
                    undone.push(ctx.join::<String>(undo).await?);
                }
                return Ok(format!("compensated {}", undone.join(",")));
            }
        }
    }
    Ok(done.join(","))
}

/// One step of a saga: a short nap, then a receipt (or a failure when asked to fail).
pub async fn durable_activity(
    ctx: Ctx,
    (step, i, fails): (String, u32, bool),
) -> Result<String, Error> {
    ctx.sleep(Duration::from_millis(1)).await?;
    if fails {
        return Err(Error::msg(format!("{step} {i} failed")));
    }
    Ok(format!("{step}-{i}"))
}

/// An order saga over host commands `reserve`, `charge`, `ship` (each given the order and
/// answering a receipt); when one fails, those done are undone with `undo` in reverse order.
pub async fn order_saga(ctx: Ctx, order: u32) -> Result<Value, Error> {
    let mut receipts: Vec<String> = Vec::new();
    for step in ["reserve", "charge", "ship"] {
        ctx.sleep(Duration::from_millis(1)).await?;
        match ctx.call::<_, String>(step, &order).await {
            Ok(receipt) => receipts.push(receipt),
            Err(error) => {
                let mut undone = Vec::new();
                for receipt in receipts.iter().rev() {
                    undone.push(ctx.call::<_, String>("undo", receipt).await?);
                }
                return Ok(
                    json!({ "order": order, "failed": error.to_string(), "undone": undone }),
                );
            }
        }
    }
    Ok(json!({ "order": order, "receipts": receipts }))
}

/// The order sagas of orders `first..first + count`, each a child workflow, spawned and joined
/// one after another: their results in order. After each it draws a random number and calls
/// `charge` with `"ORDER:NUMBER"`, leaving the answer out of its result. Its spawns, joins and
/// draws stay inside the journal, so a durable host lets those steps go on before they are on
/// disk; a call must wait until the draw it carries is, or a crash could make the call again
/// under the same key with another number.
pub async fn order_tree(ctx: Ctx, (first, count): (u32, u32)) -> Result<Vec<Value>, Error> {
    let mut results = Vec::new();
    for n in first..first + count {
        let child = ctx.spawn("order_saga", &n).await?;
        results.push(ctx.join::<Value>(child).await?);
        let drawn = ctx.random().await?;
        ctx.call::<_, String>("charge", &format!("{n}:{drawn}"))
            .await?;
    }
    Ok(results)
}

/// The tiny guest's `tally` as a later build might change it: the same input and result, but a
/// nap after each number. Replaying a journal `tiny` wrote with it is a nondeterminism error.
pub async fn tally(ctx: Ctx, count: u32) -> Result<(u32, u64), Error> {
    let mut seen = 0u32;
    let mut sum = 0u64;
    while seen < count {
        let n: u64 = ctx.recv().await?;
        ctx.sleep(Duration::from_millis(1)).await?;
        seen += 1;
        sum = sum.wrapping_add(n);
    }
    Ok((seen, sum))
}

/// Asks the host for the time `n` times in a row; returns each answer in nanoseconds since the
/// epoch. The gaps are what one step costs end to end (in a durable host: its commit too).
pub async fn ticks(ctx: Ctx, n: u32) -> Result<Vec<u64>, Error> {
    let mut ticks = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let now = ctx.now().await?;
        let nanos = now
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(Error::msg)?
            .as_nanos();
        ticks.push(u64::try_from(nanos).unwrap_or(u64::MAX));
    }
    Ok(ticks)
}

/// A long history: `steps` steps that each ask the host for `width` random numbers at once (so
/// `steps * width` events), folding them into a sum and a map held in memory. Then it tells the
/// host the count and the sum, waits for one number, and returns the count, the sum, the map's
/// size and that number: a workflow restored from a snapshot must have kept all of it.
pub async fn long_history(
    ctx: Ctx,
    (steps, width): (u32, u32),
) -> Result<(u64, u64, u64, u64), Error> {
    use std::collections::HashMap;
    let mut sum = 0u64;
    let mut count = 0u64;
    let mut buckets: HashMap<u64, u64> = HashMap::new();
    for _ in 0..steps {
        let values = futures::future::join_all((0..width).map(|_| ctx.random())).await;
        for value in values {
            let value = value?;
            sum = sum.wrapping_add(value);
            count += 1;
            *buckets.entry(value % 97).or_default() += 1;
        }
    }
    ctx.send(wfguest::Pid::HOST, &(count, sum)).await?;
    let last: u64 = ctx.recv().await?;
    Ok((count, sum, buckets.len() as u64, last))
}

/// Logs a line, sleeps a moment, logs another and returns `n`: a journal whose only text is
/// log lines (rewording them must not change what replays).
pub async fn logged(ctx: Ctx, n: u32) -> Result<u32, Error> {
    ctx.info("the logged workflow starts");
    ctx.sleep(Duration::from_millis(1)).await?;
    ctx.warn("the logged workflow ends");
    Ok(n)
}

/// Joins process `pid`, a child or not, and reports the outcome as `supervise` does.
pub async fn join_pid(ctx: Ctx, pid: u64) -> Result<Value, Error> {
    Ok(match ctx.join::<Value>(wfguest::Pid(pid)).await {
        Ok(result) => json!({ "ok": result }),
        Err(error) => outcome_error(&error),
    })
}

/// Requests `url` through the host's HTTP client, with `header` set to `value` when given;
/// reports `{"status", "body", "key"}` (the server's echo of the idempotency key in the body is
/// the server's business) or the error.
pub async fn http_get(ctx: Ctx, url: String) -> Result<Value, Error> {
    Ok(match ctx.http(wfguest::HttpRequest::get(url)).await {
        Ok(response) => json!({
            "status": response.status,
            "body": String::from_utf8_lossy(&response.body),
        }),
        Err(error) => outcome_error(&error),
    })
}

/// Makes `request` through the host's HTTP client; reports `{"status", "body"}` or the error.
pub async fn http_request(ctx: Ctx, request: wfguest::HttpRequest) -> Result<Value, Error> {
    Ok(match ctx.http(request).await {
        Ok(response) => json!({
            "status": response.status,
            "body": String::from_utf8_lossy(&response.body),
        }),
        Err(error) => outcome_error(&error),
    })
}

/// Requests each URL in turn, then sleeps `millis` (a window for a crash), then requests the
/// first again: the bodies, in order.
pub async fn http_twice(ctx: Ctx, (urls, millis): (Vec<String>, u64)) -> Result<Value, Error> {
    let mut bodies = Vec::new();
    for url in &urls {
        let response = ctx.http(wfguest::HttpRequest::get(url.clone())).await?;
        bodies.push(String::from_utf8_lossy(&response.body).into_owned());
    }
    ctx.sleep(Duration::from_millis(millis)).await?;
    if let Some(url) = urls.first() {
        let response = ctx.http(wfguest::HttpRequest::get(url.clone())).await?;
        bodies.push(String::from_utf8_lossy(&response.body).into_owned());
    }
    Ok(json!(bodies))
}

/// Calls `name` with `input` under a policy of `attempts` attempts, `initial` ms apart at first,
/// doubling; reports the outcome as `call` does.
pub async fn call_retrying(
    ctx: Ctx,
    (name, input, attempts, initial): (String, Value, u32, u64),
) -> Result<Value, Error> {
    let policy = wfguest::Retry::default()
        .initial_interval(Duration::from_millis(initial))
        .backoff(2.0)
        .max_attempts(attempts);
    Ok(
        match ctx.call_with::<_, Value>(&name, &input, policy).await {
            Ok(result) => json!({ "ok": result }),
            Err(error) => outcome_error(&error),
        },
    )
}

/// A saga of activities: `reserve`, then `charge` (compensated by `release` if it fails for
/// good), then `ship`; each result in order.
pub async fn activity_saga(ctx: Ctx, order: Value) -> Result<Value, Error> {
    let reserved: Value = ctx.call("inventory.reserve", &order).await?;
    let charged = match ctx.call::<_, Value>("payments.charge", &order).await {
        Ok(charged) => charged,
        Err(error) => {
            let released: Value = ctx.call("inventory.release", &reserved).await?;
            return Ok(json!({ "failed": error.to_string(), "released": released }));
        }
    };
    let shipped: Value = ctx.call("shipping.ship", &order).await?;
    Ok(json!([reserved, charged, shipped]))
}

/// Calls `name` `n` times, one after another; the number of calls that succeeded.
pub async fn call_loop(ctx: Ctx, (name, n): (String, u32)) -> Result<u32, Error> {
    let mut succeeded = 0;
    for i in 0..n {
        if ctx.call::<_, Value>(&name, &i).await.is_ok() {
            succeeded += 1;
        }
    }
    Ok(succeeded)
}

/// Requests `url` `n` times, one after another; the number of 200s.
pub async fn http_loop(ctx: Ctx, (url, n): (String, u32)) -> Result<u32, Error> {
    let mut ok = 0;
    for _ in 0..n {
        let response = ctx.http(wfguest::HttpRequest::get(url.clone())).await?;
        if response.status == 200 {
            ok += 1;
        }
    }
    Ok(ok)
}

/// The next message that decodes as a number, within `millis`: `null` if none came.
pub async fn valid_within(ctx: Ctx, millis: u64) -> Result<Option<u64>, Error> {
    ctx.recv_valid_timeout::<u64>(Duration::from_millis(millis))
        .await
}

wfguest::entry_points!(
    echo,
    fail,
    panic,
    spin,
    hog,
    print,
    exit,
    sandbox,
    sleepy,
    unknown_command,
    relay,
    ordered,
    collect,
    send_to,
    wait_message,
    supervise,
    measure,
    cleanup_on_cancel,
    stubborn,
    slow_consumer,
    cancel_child,
    cancel_unknown,
    call,
    time_and_chance,
    fork,
    flood,
    thread_sleep,
    chatter,
    slow_start = wfguest::machine::<SlowStart>(),
    bomb,
    deluge,
    recurse,
    big_result,
    strict_call,
    call_sized,
    close_stdout,
    flooder,
    flood_victim,
    hog_loop,
    crowd,
    call_then_spin,
    nap,
    impatient_join,
    combinators,
    typed_messages,
    strict_recv,
    alarm,
    report,
    report_once,
    spawn_many,
    cancel_sleeper,
    calls,
    durable_mix,
    durable_child,
    print_around_sleep,
    durable_activity,
    order_saga,
    order_tree,
    tally,
    ticks,
    long_history,
    "send-report" = report,
    "v2.echo" = echo,
    join_pid,
    logged,
    http_get,
    http_request,
    http_twice,
    call_retrying,
    activity_saga,
    valid_within,
    call_loop,
    http_loop,
    chain,
    nest,
    nap_then_message,
    report_then_wait,
    versioned,
    wait_then_chain,
);
