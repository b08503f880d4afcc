//! What a durable host needs of the scheduler: steps held until their journal has them, processes
//! started under pids it recorded, and processes a stop leaves alone.

use std::time::Duration;

use crossbeam_channel::{unbounded, Receiver, Sender};
use wfcontract::{Command, Event, EventKind, Payload, Pid, SendRequest, Status, StepOutput};
use wfhost_scheduler::{
    Error, Events, Hold, InitContext, Process, ProcessError, Release, Scheduler, Spawn,
};

const PATIENCE: Duration = Duration::from_secs(30);

/// Counts to `until`: each step sends `n` to itself and holds the step; the test releases holds.
struct Journaled {
    until: u64,
    pid: Pid,
    steps: u64,
    holds: Sender<(u64, Release)>,
}

impl Process for Journaled {
    fn init(&mut self, ctx: &InitContext, _: &str, _: Payload) -> Result<(), ProcessError> {
        self.pid = ctx.pid();
        Ok(())
    }

    fn step(&mut self, events: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
        let got: Vec<Event> = events.collect();
        assert!(got.iter().all(|e| e.kind != EventKind::Cancel));
        self.steps += 1;
        out.receive = u32::MAX;
        if self.steps > self.until {
            out.status = Status::Done(Payload::json_bytes(self.steps.to_string().into_bytes()));
            return Ok(());
        }
        out.yields.push(wfcontract::Yield {
            tag: wfcontract::Tag(self.steps),
            command: Command::Send(SendRequest {
                to: self.pid,
                message: Payload::empty(),
            }),
        });
        out.status = Status::Idle;
        Ok(())
    }

    fn journal(&mut self, _: &StepOutput, hold: &Hold<'_>) {
        self.holds.send((self.steps, hold.hold())).unwrap();
    }
}

fn journaled(until: u64) -> (Journaled, Receiver<(u64, Release)>) {
    let (holds, rx) = unbounded();
    let process = Journaled {
        until,
        pid: Pid::HOST,
        steps: 0,
        holds,
    };
    (process, rx)
}

#[test]
fn a_held_step_has_no_effect_until_it_is_released() {
    let scheduler = Scheduler::builder().workers(2).build().unwrap();
    let (process, holds) = journaled(3);
    let handle = scheduler
        .handle()
        .spawn_handle_with(Spawn::new(process, "main", Payload::empty()))
        .unwrap();
    // Each step's send reaches the process only once released: without the release nothing
    // steps again, so exactly one hold at a time is outstanding.
    for expected in 1..=4 {
        let (step, release) = holds.recv_timeout(PATIENCE).unwrap();
        assert_eq!(step, expected);
        assert!(
            holds.try_recv().is_err(),
            "a second step ran before the release"
        );
        assert!(handle.wait_timeout(Duration::ZERO).is_none());
        release.release();
    }
    assert_eq!(handle.wait().unwrap(), Payload::json_bytes(b"4".to_vec()));
    let counters = scheduler.handle().counters();
    assert_eq!(counters.steps, 4);
    scheduler.shutdown(PATIENCE);
}

#[test]
fn a_release_racing_the_park_is_not_lost() {
    // Releasing from inside `journal`'s own thread before the worker parks the process: the
    // process must still go on (the wake-up sets the flag that makes the park fail).
    struct Eager {
        steps: u64,
    }
    impl Process for Eager {
        fn init(&mut self, _: &InitContext, _: &str, _: Payload) -> Result<(), ProcessError> {
            Ok(())
        }
        fn step(&mut self, _: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
            self.steps += 1;
            out.status = if self.steps == 1_000 {
                Status::Done(Payload::json_bytes(b"1000".to_vec()))
            } else {
                Status::Continue
            };
            Ok(())
        }
        fn journal(&mut self, _: &StepOutput, hold: &Hold<'_>) {
            hold.hold().release();
        }
    }
    let scheduler = Scheduler::builder().workers(2).build().unwrap();
    let runs: Vec<_> = (0..20)
        .map(|_| {
            scheduler
                .handle()
                .spawn_handle_with(Spawn::new(Eager { steps: 0 }, "main", Payload::empty()))
                .unwrap()
        })
        .collect();
    for run in runs {
        assert_eq!(run.wait().unwrap(), Payload::json_bytes(b"1000".to_vec()));
    }
    assert_eq!(scheduler.handle().counters().steps, 20_000);
    scheduler.shutdown(PATIENCE);
}

#[test]
fn a_process_starts_under_the_pid_it_is_given_and_reserved_pids_are_skipped() {
    let scheduler = Scheduler::builder().workers(1).build().unwrap();
    let handle = scheduler.handle();
    handle.reserve_pids_through(Pid(1_000));
    let reserved = handle.reserve_pid();
    assert_eq!(reserved, Pid(1_001));
    let (waiter, _holds) = journaled(1_000_000);
    let run = handle
        .spawn_handle_with(Spawn::new(waiter, "main", Payload::empty()).pid(Pid(7)))
        .unwrap();
    assert_eq!(run.pid(), Pid(7));
    let (other, _more) = journaled(1);
    let taken = handle.spawn_with(Spawn::new(other, "main", Payload::empty()).pid(Pid(7)));
    assert_eq!(taken, Err(Error::PidInUse(Pid(7))));
    assert_eq!(handle.live(), 1);
    let next = handle
        .spawn_with(Spawn::new(journaled(1).0, "main", Payload::empty()))
        .unwrap();
    assert_eq!(next, Pid(1_002));
    scheduler.shutdown(Duration::ZERO);
}

#[test]
fn a_stop_neither_cancels_nor_waits_for_processes_that_survive_it() {
    let scheduler = Scheduler::builder().workers(1).build().unwrap();
    let handle = scheduler.handle();
    let (ended_tx, ended_rx) = unbounded();
    // Waits for a message that never comes; a cancel would fail the assertion in its step.
    let (process, holds) = journaled(1_000_000);
    let survivor = handle
        .spawn_handle_with(
            Spawn::new(process, "main", Payload::empty())
                .survives_stop(true)
                .notify(ended_tx),
        )
        .unwrap();
    let (_, release) = holds.recv_timeout(PATIENCE).unwrap();
    drop(release);
    let started = std::time::Instant::now();
    let report = scheduler.shutdown(Duration::from_secs(600));
    // Not waited for: the grace period of ten minutes was not spent on it.
    assert!(started.elapsed() < Duration::from_secs(300));
    assert_eq!(report.live_at_start, 1);
    let (pid, result) = ended_rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!(pid, survivor.pid());
    assert_eq!(
        result.unwrap_err().kind(),
        wfhost_scheduler::FailureKind::Terminated
    );
}

/// Tells the test of every message it takes; never ends on its own.
struct Listener(Sender<(Pid, Payload)>, Pid);

impl Process for Listener {
    fn init(&mut self, ctx: &InitContext, _: &str, _: Payload) -> Result<(), ProcessError> {
        self.1 = ctx.pid();
        Ok(())
    }

    fn step(&mut self, events: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
        for event in events {
            if event.kind == EventKind::Message {
                self.0.send((self.1, event.data)).unwrap();
            }
        }
        out.receive = u32::MAX;
        out.status = Status::Wait;
        Ok(())
    }
}

#[test]
fn yields_marked_to_go_now_are_dispatched_before_the_release_and_the_rest_after() {
    /// Sends one message to each of `to` in one step, holds it, and lets the first go now.
    struct Sender2 {
        to: [Pid; 2],
        holds: Sender<Release>,
        done: bool,
    }
    impl Process for Sender2 {
        fn init(&mut self, _: &InitContext, _: &str, _: Payload) -> Result<(), ProcessError> {
            Ok(())
        }
        fn step(&mut self, _: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
            if std::mem::replace(&mut self.done, true) {
                out.status = Status::Done(Payload::empty());
                return Ok(());
            }
            for (n, to) in self.to.iter().enumerate() {
                out.yields.push(wfcontract::Yield {
                    tag: wfcontract::Tag(n as u64 + 1),
                    command: Command::Send(SendRequest {
                        to: *to,
                        message: Payload::json_bytes(n.to_string().into_bytes()),
                    }),
                });
            }
            out.receive = u32::MAX;
            out.status = Status::Continue;
            Ok(())
        }
        fn journal(&mut self, out: &StepOutput, hold: &Hold<'_>) {
            if out.yields.is_empty() {
                return;
            }
            self.holds.send(hold.hold()).unwrap();
            hold.dispatch_first(1);
        }
    }
    let scheduler = Scheduler::builder().workers(2).build().unwrap();
    let handle = scheduler.handle();
    let (heard_tx, heard) = unbounded();
    let early = handle
        .spawn(
            Listener(heard_tx.clone(), Pid::HOST),
            "main",
            Payload::empty(),
        )
        .unwrap();
    let late = handle
        .spawn(Listener(heard_tx, Pid::HOST), "main", Payload::empty())
        .unwrap();
    let (holds_tx, holds) = unbounded();
    let sender = handle
        .spawn_handle_with(Spawn::new(
            Sender2 {
                to: [early, late],
                holds: holds_tx,
                done: false,
            },
            "main",
            Payload::empty(),
        ))
        .unwrap();
    let release = holds.recv_timeout(PATIENCE).unwrap();
    // The first message arrives while the step is held; the second, and the sender's next step
    // (its status was `Continue`), wait for the release.
    assert_eq!(
        heard.recv_timeout(PATIENCE).unwrap(),
        (early, Payload::json_bytes(b"0".to_vec()))
    );
    assert!(sender.wait_timeout(Duration::ZERO).is_none());
    assert!(
        heard.try_recv().is_err(),
        "a held yield went before the release"
    );
    release.release();
    assert_eq!(
        heard.recv_timeout(PATIENCE).unwrap(),
        (late, Payload::json_bytes(b"1".to_vec()))
    );
    assert_eq!(sender.wait().unwrap(), Payload::empty());
    assert!(heard.try_recv().is_err());
    assert_eq!(handle.counters().steps, 2 + 2 + 2);
    scheduler.shutdown(Duration::ZERO);
}

/// Counts its `init`s in `inits`; asks for every message, and ends with how many its second
/// step got.
struct Counting {
    inits: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    steps: u32,
}

impl Process for Counting {
    fn init(&mut self, _: &InitContext, _: &str, _: Payload) -> Result<(), ProcessError> {
        self.inits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    fn step(&mut self, events: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
        let messages = events.filter(|e| e.kind == EventKind::Message).count();
        self.steps += 1;
        out.receive = u32::MAX;
        out.status = match self.steps {
            1 => Status::Idle,
            _ => Status::Done(Payload::json_bytes(messages.to_string().into_bytes())),
        };
        Ok(())
    }
}

/// A process spawned held takes no turn (not even its `init`) until its waker wakes it; what is
/// sent to it meanwhile waits in its inbox and reaches its steps. A held one that is terminated
/// ends at once, with the termination.
#[test]
fn a_held_process_takes_no_turn_until_it_is_woken() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    // One worker, which takes what is spawned from outside in order.
    let scheduler = Scheduler::builder().workers(1).build().unwrap();
    let inits = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = unbounded();
    let held = Counting {
        inits: Arc::clone(&inits),
        steps: 0,
    };
    let pid = scheduler
        .spawn_with(
            Spawn::new(held, "held", Payload::empty())
                .held()
                .notify(tx.clone()),
        )
        .unwrap();
    for _ in 0..3 {
        scheduler.send(pid, Payload::empty()).unwrap();
    }
    // A process spawned after it runs to its end: had the held one been queued, the worker
    // would have taken it first.
    let after = Counting {
        inits: Arc::new(AtomicUsize::new(0)),
        steps: 1,
    };
    let later = scheduler
        .spawn_with(Spawn::new(after, "after", Payload::empty()).notify(tx))
        .unwrap();
    let (ended, _) = rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!(ended, later);
    assert_eq!(inits.load(Ordering::SeqCst), 0);
    assert_eq!(scheduler.live(), 1);

    scheduler.waker(pid).expect("it exists").wake();
    let (ended, result) = rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!(ended, pid);
    assert_eq!(&result.unwrap().bytes[..], b"3");
    assert_eq!(inits.load(Ordering::SeqCst), 1);
    assert!(scheduler.waker(pid).is_none());

    let stuck = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = unbounded();
    let terminated = scheduler
        .spawn_with(
            Spawn::new(
                Counting {
                    inits: Arc::clone(&stuck),
                    steps: 0,
                },
                "held",
                Payload::empty(),
            )
            .held()
            .notify(tx),
        )
        .unwrap();
    scheduler.terminate(terminated, "enough").unwrap();
    let (_, result) = rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!(result.unwrap_err().message(), "enough");
    assert_eq!(scheduler.live(), 0);
}

/// Records what it is sent, tagged with its generation, and ends at "stop".
struct Collector {
    generation: u32,
    seen: Sender<(u32, String)>,
}

impl Process for Collector {
    fn init(&mut self, _: &InitContext, _: &str, _: Payload) -> Result<(), ProcessError> {
        Ok(())
    }

    fn step(&mut self, events: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
        out.receive = u32::MAX;
        out.status = Status::Idle;
        for event in events {
            if event.kind == EventKind::Message {
                let text: String = event.data.decode().unwrap();
                self.seen.send((self.generation, text.clone())).unwrap();
                if text == "stop" {
                    out.status = Status::Done(Payload::empty());
                }
            }
        }
        Ok(())
    }
}

/// Sends each `(pid, text)` it is sent on to that pid, from a step (so through its worker's
/// cache of send targets), and reports what the send came back with.
struct Relay {
    results: Sender<Result<(), String>>,
}

impl Process for Relay {
    fn init(&mut self, _: &InitContext, _: &str, _: Payload) -> Result<(), ProcessError> {
        Ok(())
    }

    fn step(&mut self, events: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
        out.receive = u32::MAX;
        out.status = Status::Idle;
        for event in events {
            match event.kind {
                EventKind::Message => {
                    let (to, text): (u64, String) = event.data.decode().unwrap();
                    out.yields.push(wfcontract::Yield {
                        tag: wfcontract::Tag(1),
                        command: Command::Send(SendRequest {
                            to: Pid(to),
                            message: Payload::to_postcard(&text).unwrap(),
                        }),
                    });
                    // Waits for the send's completion, which does not wake an idle process.
                    out.status = Status::Wait;
                }
                EventKind::YieldComplete => {
                    let result = match &event.error {
                        None => Ok(()),
                        Some(error) => Err(error.message.clone()),
                    };
                    self.results.send(result).unwrap();
                }
                EventKind::Cancel => out.status = Status::Done(Payload::empty()),
            }
        }
        Ok(())
    }
}

/// A durable host starts a workflow again under the pid it had. A process that sent to the pid
/// before (its worker keeps the receiver it found) reaches the process that has the pid now,
/// not the one that ended.
#[test]
fn a_send_reaches_the_process_that_has_the_pid_now() {
    let scheduler = Scheduler::builder().workers(1).build().unwrap();
    let handle = scheduler.handle();
    let (seen_tx, seen) = unbounded();
    let (results_tx, results) = unbounded();
    let pid = Pid(50);
    let collector = |generation| {
        Spawn::new(
            Collector {
                generation,
                seen: seen_tx.clone(),
            },
            "main",
            Payload::empty(),
        )
        .pid(pid)
    };
    let first = handle.spawn_handle_with(collector(1)).unwrap();
    let relay = handle
        .spawn(
            Relay {
                results: results_tx,
            },
            "relay",
            Payload::empty(),
        )
        .unwrap();
    let relay_to = |text: &str| {
        handle
            .send(
                relay,
                Payload::to_postcard(&(pid.0, text.to_string())).unwrap(),
            )
            .unwrap();
        results.recv_timeout(PATIENCE).unwrap()
    };
    assert_eq!(relay_to("a"), Ok(()));
    assert_eq!(relay_to("stop"), Ok(()));
    first.wait().unwrap();
    // Between the two: nobody has the pid.
    let refused = relay_to("lost");
    assert!(
        refused.as_ref().is_err_and(|e| e.contains("no process")),
        "{refused:?}"
    );
    let second = handle.spawn_handle_with(collector(2)).unwrap();
    assert_eq!(relay_to("b"), Ok(()));
    assert_eq!(relay_to("stop"), Ok(()));
    second.wait().unwrap();
    let got: Vec<(u32, String)> = seen.try_iter().collect();
    let want = [(1, "a"), (1, "stop"), (2, "b"), (2, "stop")];
    let want: Vec<(u32, String)> = want.iter().map(|(g, t)| (*g, t.to_string())).collect();
    assert_eq!(got, want);
    scheduler.shutdown(Duration::ZERO);
}
