//! The order a worker runs what it has: a tree of spawns depth first, so that the processes alive
//! at once stay few however large the tree; and a process that spawns at every step no further
//! ahead of its children than one turn's budget.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{de, pc, Proc, PATIENCE};
use wfcontract::{Command, CommandKind, EventKind, SendRequest, SpawnRequest, Status, Tag};
use wfhost_scheduler::{Context, Request, Scheduler, Spawn, DEFAULT_BUDGET};

const BRANCHES: u32 = 4;
const DEPTH: u32 = 6;

/// Processes spawned and not yet finished: now, and the most there ever were.
#[derive(Default)]
struct Alive {
    now: AtomicUsize,
    most: AtomicUsize,
    spawned: AtomicUsize,
}

impl Alive {
    fn up(&self) {
        let now = self.now.fetch_add(1, Ordering::Relaxed) + 1;
        self.most.fetch_max(now, Ordering::Relaxed);
        self.spawned.fetch_add(1, Ordering::Relaxed);
    }

    fn down(&self) {
        self.now.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A node at `depth`: below `DEPTH` it spawns `BRANCHES` children and reports how many nodes its
/// subtree has once each child has reported; a leaf reports 1.
fn node(alive: Arc<Alive>) -> Proc<(u32, u64)> {
    Proc::new((0, 0), move |(reported, sum), env, events, out| {
        let depth: u32 = de(&env.input);
        let finish = |out: &mut wfcontract::StepOutput, total: u64| {
            if let Some(parent) = env.parent {
                out.push(
                    Tag(0),
                    Command::Send(SendRequest {
                        to: parent,
                        message: pc(&total),
                    }),
                );
            }
            out.status = Status::Done(pc(&total));
            alive.down();
        };
        if depth == DEPTH {
            return finish(out, 1);
        }
        if env.first {
            for i in 0..BRANCHES {
                out.push(
                    Tag(u64::from(i) + 1),
                    Command::Spawn(SpawnRequest {
                        module: None,
                        entry: "node".into(),
                        input: pc(&(depth + 1)),
                    }),
                );
            }
        }
        for event in events {
            if event.kind == EventKind::Message {
                *reported += 1;
                *sum += de::<u64>(&event.data);
            }
        }
        out.status = Status::Idle;
        if *reported == BRANCHES {
            finish(out, *sum + 1);
        }
    })
}

fn tree_scheduler(alive: &Arc<Alive>) -> Scheduler {
    let for_handler = Arc::clone(alive);
    Scheduler::builder()
        .workers(1)
        .handler(
            CommandKind::Spawn,
            move |request: Request, cx: &Context<'_>| {
                if let Command::Spawn(spawn) = request.command {
                    for_handler.up();
                    let child =
                        Spawn::new(node(Arc::clone(&for_handler)), spawn.entry, spawn.input);
                    let pid = cx.spawn_child(child).expect("scheduler running");
                    cx.complete(request.tag, Ok(pc(&pid)));
                }
            },
        )
        .build()
        .unwrap()
}

/// A tree of 5,461 processes on one worker never has more alive than about one path's worth of
/// siblings: each level's children along the path being worked on, and the root (25), with a
/// level's slack for the worker's look at its other queue every budget's worth of spawns (26 are
/// seen). Breadth first
/// (spawns queued behind everything else), all 5,461 were alive at once.
#[test]
fn a_tree_of_spawns_runs_depth_first() {
    let alive = Arc::new(Alive::default());
    let scheduler = tree_scheduler(&alive);
    alive.up();
    let root = scheduler
        .spawn_handle(node(Arc::clone(&alive)), "node", pc(&0u32))
        .unwrap();
    let total: u64 = de(&root.wait_timeout(PATIENCE).unwrap().unwrap());
    let nodes = (BRANCHES.pow(DEPTH + 1) - 1) / (BRANCHES - 1);
    assert_eq!(total, u64::from(nodes));
    assert_eq!(alive.spawned.load(Ordering::Relaxed), nodes as usize);
    assert_eq!(alive.now.load(Ordering::Relaxed), 0);
    let most = alive.most.load(Ordering::Relaxed);
    eprintln!("at most {most} alive at once");
    assert!(
        most <= (1 + BRANCHES * (DEPTH + 1)) as usize,
        "{most} processes were alive at once"
    );
}

/// One process spawning a child at every step and asking to run again, on one worker: its
/// children (each done at its first step) run before its next turn, so no more than a turn's worth
/// (the budget: one step per event or empty step) wait unstarted. Taking spawns and the queue the
/// spawner goes back to in strict turns let them pile up by 31 a turn: 10,000 of 20,000 waited,
/// and under a process limit of 1,000, 18,378 spawns were refused.
#[test]
fn a_process_that_spawns_at_every_step_stays_a_budget_ahead_of_its_children() {
    const CHILDREN: u64 = 5_000;
    let alive = Arc::new(Alive::default());
    let for_handler = Arc::clone(&alive);
    let scheduler = Scheduler::builder()
        .workers(1)
        .max_processes(Some(DEFAULT_BUDGET + 8))
        .handler(
            CommandKind::Spawn,
            move |request: Request, cx: &Context<'_>| {
                for_handler.up();
                let counted = Arc::clone(&for_handler);
                let child = Proc::new((), move |_, _, _, out| {
                    counted.down();
                    out.status = Status::Done(pc(&0u8));
                });
                let spawned = cx.spawn_child(Spawn::new(child, "child", pc(&0u8)));
                cx.complete(
                    request.tag,
                    spawned
                        .map(|pid| pc(&pid))
                        .map_err(|error| error.into_command_error()),
                );
            },
        )
        .build()
        .unwrap();
    let spawner = Proc::new((0u64, 0u64), |(made, refused), _, events, out| {
        for event in events {
            if event.kind == EventKind::YieldComplete && event.error.is_some() {
                *refused += 1;
            }
        }
        if *made == CHILDREN {
            out.status = Status::Done(pc(&*refused));
            return;
        }
        *made += 1;
        out.push(
            Tag(*made),
            Command::Spawn(SpawnRequest {
                module: None,
                entry: "child".into(),
                input: pc(&0u8),
            }),
        );
        out.status = Status::Continue;
    });
    let handle = scheduler
        .spawn_handle(spawner, "spawner", pc(&0u8))
        .unwrap();
    let refused: u64 = de(&handle.wait_timeout(PATIENCE).unwrap().unwrap());
    assert_eq!(refused, 0);
    assert_eq!(alive.spawned.load(Ordering::Relaxed), CHILDREN as usize);
    let most = alive.most.load(Ordering::Relaxed);
    assert!(
        most <= DEFAULT_BUDGET,
        "{most} children waited unstarted at once"
    );
}
