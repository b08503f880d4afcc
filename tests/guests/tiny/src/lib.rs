//! A small workflow module: what a process that spends its life waiting looks like. The scale
//! benchmarks run it by the hundred thousand and the hibernation tests check that its state
//! survives losing its instance.

use std::time::Duration;

use wfguest::{Ctx, Error};

/// Waits for one number and returns it.
pub async fn wait(ctx: Ctx, _: ()) -> Result<u64, Error> {
    ctx.recv().await
}

/// Receives `count` numbers, one message at a time, and returns how many and their sum.
pub async fn tally(ctx: Ctx, count: u32) -> Result<(u32, u64), Error> {
    let mut seen = 0u32;
    let mut sum = 0u64;
    while seen < count {
        let n: u64 = ctx.recv().await?;
        seen += 1;
        sum = sum.wrapping_add(n);
    }
    Ok((seen, sum))
}

/// The pattern [`hoard`] writes: `len` bytes from a xorshift generator seeded with `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// FNV-1a over `bytes`.
pub fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Fills `kib` KiB of its heap with a pattern seeded by `seed`, then waits for `rounds` messages;
/// returns the checksum of what its heap holds after the last, with the sum of the messages.
pub async fn hoard(ctx: Ctx, (kib, seed, rounds): (u32, u64, u32)) -> Result<(u64, u64), Error> {
    let hoard = pattern(seed, kib as usize * 1024);
    let mut sum = 0u64;
    for _ in 0..rounds {
        sum = sum.wrapping_add(ctx.recv::<u64>().await?);
    }
    Ok((checksum(&hoard), sum))
}

/// Sleeps `millis`, then waits for a message (so that finishing is not part of waking), and
/// returns how long it slept, in microseconds. Measured with the WASI monotonic clock (not the
/// `now` command, whose round trips would count), which a benchmark may use and a workflow should
/// not: a replay would see other times.
pub async fn nap(ctx: Ctx, millis: u64) -> Result<u64, Error> {
    let asleep = std::time::Instant::now();
    ctx.sleep(Duration::from_millis(millis)).await?;
    let slept = asleep.elapsed();
    ctx.recv::<()>().await?;
    Ok(slept.as_micros() as u64)
}

/// A skynet tree: a process of `size` leaves below it spawns ten children of a tenth each, and
/// returns the sum of its leaves' numbers (a leaf's number is its index, from `first`).
pub async fn skynet(ctx: Ctx, (first, size): (u64, u64)) -> Result<u64, Error> {
    if size <= 1 {
        return Ok(first);
    }
    let part = size / 10;
    let spawns: Vec<_> = (0..10)
        .map(|i| ctx.spawn("skynet", &(first + i * part, part)))
        .collect();
    let mut children = Vec::with_capacity(spawns.len());
    for spawn in spawns {
        children.push(spawn.await?);
    }
    let mut sum = 0u64;
    for child in children {
        sum += ctx.join::<u64>(child).await?;
    }
    Ok(sum)
}

wfguest::entry_points!(wait, tally, hoard, nap, skynet);
