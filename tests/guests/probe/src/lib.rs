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

/// Calls a host command nobody registered; returns the error's kind and message.
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
        let _ = ctx.send_payload(message.from, message.data);
    }
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
    relay
);
