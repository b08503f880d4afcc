//! Fan-out and fan-in: a parent spawns N children, each sums its piece of a range, and the parent
//! joins them all and adds the pieces up.

use serde::{Deserialize, Serialize};
use wfguest::{Ctx, Error};

/// How to split the work.
#[derive(Debug, Deserialize)]
pub struct Plan {
    /// Children to spawn.
    pub children: u64,
    /// Numbers each child sums.
    pub piece: u64,
}

/// The answer.
#[derive(Debug, Serialize)]
pub struct Sum {
    /// Children that worked.
    pub children: u64,
    /// `0 + 1 + ... + (children * piece - 1)`, computed piecewise.
    pub total: u64,
}

/// Spawns the children (all at once), then joins them all.
pub async fn fanout(ctx: Ctx, plan: Plan) -> Result<Sum, Error> {
    let spawns: Vec<_> = (0..plan.children)
        .map(|i| ctx.spawn("piece", &(i * plan.piece, plan.piece)))
        .collect();
    let mut children = Vec::with_capacity(spawns.len());
    for spawn in spawns {
        children.push(spawn.await?);
    }
    let joins: Vec<_> = children
        .iter()
        .map(|child| ctx.join::<u64>(*child))
        .collect();
    let mut total = 0u64;
    for join in joins {
        total += join.await?;
    }
    Ok(Sum {
        children: plan.children,
        total,
    })
}

/// Sums `start .. start + len`.
pub async fn piece(_ctx: Ctx, (start, len): (u64, u64)) -> Result<u64, Error> {
    Ok((start..start + len).sum())
}

wfguest::entry_points!(fanout, piece);
