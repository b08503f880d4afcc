//! A ring: N processes pass a token M hops, and the ring reports how many hops per second it did.

use serde::{Deserialize, Serialize};
use wfguest::{Ctx, Error, Pid};

/// The ring to build.
#[derive(Debug, Deserialize)]
pub struct Ring {
    /// Processes in the ring.
    pub members: u32,
    /// Times the token is passed on.
    pub hops: u64,
}

/// What the ring did.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Processes in the ring.
    pub members: u32,
    /// Hops made.
    pub hops: u64,
    /// Wall time from the first hop to the last, by the host's clock.
    pub seconds: f64,
    /// `hops / seconds`.
    pub hops_per_second: f64,
}

/// What members say to one another.
#[derive(Debug, Serialize, Deserialize)]
pub enum Note {
    /// The member to pass the token to.
    Next(Pid),
    /// The token, with the hops still to make after this one.
    Token(u64),
}

/// Builds the ring, sends the token round, and times it.
pub async fn ring(ctx: Ctx, plan: Ring) -> Result<Report, Error> {
    if plan.members == 0 || plan.hops == 0 {
        return Err(Error::msg("a ring needs at least one member and one hop"));
    }
    // All spawns in flight at once, then all the introductions.
    let spawns: Vec<_> = (0..plan.members)
        .map(|_| ctx.spawn("member", &ctx.pid()))
        .collect();
    let mut members = Vec::with_capacity(spawns.len());
    for spawn in spawns {
        members.push(spawn.await?);
    }
    let introductions: Vec<_> = members
        .iter()
        .enumerate()
        .map(|(i, member)| ctx.send(*member, &Note::Next(members[(i + 1) % members.len()])))
        .collect();
    for introduction in introductions {
        introduction.await?;
    }
    let start = ctx.now().await?;
    ctx.send(members[0], &Note::Token(plan.hops - 1)).await?;
    let _done: u64 = ctx.recv().await?;
    let seconds = ctx
        .now()
        .await?
        .duration_since(start)
        .map_err(Error::msg)?
        .as_secs_f64();
    ctx.info(format!("{} hops in {seconds:.3} s", plan.hops));
    // Returning ends the members too: children are cancelled when their parent finishes.
    Ok(Report {
        members: plan.members,
        hops: plan.hops,
        seconds,
        hops_per_second: plan.hops as f64 / seconds.max(1e-9),
    })
}

/// A member: learns its neighbour, then passes the token on until it runs out, and then tells the
/// ring's owner.
pub async fn member(ctx: Ctx, owner: Pid) -> Result<(), Error> {
    let mut next = None;
    loop {
        let note = match ctx.recv::<Note>().await {
            Ok(note) => note,
            Err(Error::Cancelled) => return Ok(()),
            Err(error) => return Err(error),
        };
        match (note, next) {
            (Note::Next(pid), _) => next = Some(pid),
            // Not awaited: the acknowledgement is of no interest, so the member stays idle.
            (Note::Token(0), _) => drop(ctx.send(owner, &0u64)),
            (Note::Token(left), Some(next)) => drop(ctx.send(next, &Note::Token(left - 1))),
            (Note::Token(_), None) => {
                return Err(Error::msg("the token came before the neighbour"))
            }
        }
    }
}

wfguest::entry_points!(ring, member);
