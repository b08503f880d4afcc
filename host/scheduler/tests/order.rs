//! The order a worker runs what it has: a tree of spawns depth first, so that the processes alive
//! at once stay few however large the tree.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{de, pc, Proc, PATIENCE};
use wfcontract::{Command, CommandKind, EventKind, SendRequest, SpawnRequest, Status, Tag};
use wfhost_scheduler::{Context, Request, Scheduler, Spawn};

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
        .handler(CommandKind::Spawn, move |request: Request, cx: &Context<'_>| {
            if let Command::Spawn(spawn) = request.command {
                for_handler.up();
                let child = Spawn::new(node(Arc::clone(&for_handler)), spawn.entry, spawn.input);
                let pid = cx.spawn_child(child).expect("scheduler running");
                cx.complete(request.tag, Ok(pc(&pid)));
            }
        })
        .build()
        .unwrap()
}

/// A tree of 5,461 processes on one worker never has more alive than one path's worth of
/// siblings: each level's children, along the path being worked on, and the root. Breadth first
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
        most <= (1 + BRANCHES * DEPTH) as usize,
        "{most} processes were alive at once"
    );
}
