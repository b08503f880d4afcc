//! What one process cannot do to another: flood it with messages, hold a worker, take an
//! instance it needs without it waiting its turn; and what a parent and the host hear of a
//! child that was stopped. Native processes, exact counts, no sleeps as synchronisation.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{de, pc, Proc, PATIENCE};
use crossbeam_channel::unbounded;
use parking_lot::Mutex;
use wfcontract::{
    Command, ErrorKind, EventKind, Payload, Pid, SendRequest, SpawnRequest, Status, StepOutput, Tag,
};
use wfhost_scheduler::{
    Events, FailureKind, InitContext, Process, ProcessError, Readiness, Scheduler, Spawn, Spawner,
    Waker, WakerSource,
};

/// Messages stay in the mailbox until the process asks for them, then arrive no more than it
/// asked for per step; the mailbox limit applies to the rest.
#[test]
fn messages_wait_in_the_mailbox_until_the_process_asks_for_them() {
    let (gate, gates) = unbounded();
    let gate = Mutex::new(gate);
    let scheduler = Scheduler::builder()
        .workers(1)
        .mailbox_limit(Some(5))
        .handler(
            wfcontract::CommandKind::Call,
            move |req: wfhost_scheduler::Request, cx: &wfhost_scheduler::Context<'_>| {
                gate.lock().send(cx.completer(req.tag)).unwrap();
            },
        )
        .build()
        .unwrap();
    // Its first step asks for no message and waits for a call; from its second on it asks for
    // two messages at a time, until it has five. It records what each step brought.
    let seen = Arc::new(Mutex::new(Vec::<usize>::new()));
    let record = Arc::clone(&seen);
    let process = Proc::new((), move |_, env, events, out| {
        let messages = events.filter(|e| e.kind == EventKind::Message).count();
        let mut seen = record.lock();
        seen.push(messages);
        if env.first {
            out.push(
                Tag(1),
                Command::Call(wfcontract::CallRequest {
                    name: "gate".into(),
                    input: Payload::empty(),
                }),
            );
            out.receive = 0;
            out.status = Status::Wait;
        } else if seen.iter().sum::<usize>() == 5 {
            out.status = Status::Done(Payload::empty());
        } else {
            out.receive = 2;
            out.status = Status::Idle;
        }
    });
    let handle = scheduler
        .spawn_handle(process, "receiver", Payload::empty())
        .unwrap();
    let pid = handle.pid();
    let call = gates.recv_timeout(PATIENCE).unwrap();
    // Five fit; the sixth is refused though the process is waiting: nothing left the mailbox.
    for n in 0..5u32 {
        scheduler.send(pid, pc(&n)).unwrap();
    }
    assert_eq!(
        scheduler.send(pid, pc(&5u32)),
        Err(wfhost_scheduler::Error::MailboxFull(pid))
    );
    call.complete(Ok(Payload::empty()));
    handle.wait_timeout(PATIENCE).unwrap().unwrap();
    assert_eq!(*seen.lock(), [0, 0, 2, 2, 1]);
}

/// A process that cannot step yet (it waits for something taken) is not stepped, whatever
/// arrives for it, until its waker is woken; then one step takes everything queued.
struct Gated {
    open: Arc<AtomicBool>,
    waker: Arc<Mutex<Option<Waker>>>,
    prepared: Arc<AtomicUsize>,
    steps: Arc<AtomicUsize>,
}

impl Process for Gated {
    fn init(&mut self, _: &InitContext, _: &str, _: Payload) -> Result<(), ProcessError> {
        Ok(())
    }

    fn prepare(&mut self, waker: &WakerSource<'_>) -> Result<Readiness, ProcessError> {
        self.prepared.fetch_add(1, Ordering::SeqCst);
        if self.open.load(Ordering::SeqCst) {
            return Ok(Readiness::Ready);
        }
        *self.waker.lock() = Some(waker.waker());
        // The gate may have opened while the waker was being handed over.
        if self.open.load(Ordering::SeqCst) {
            return Ok(Readiness::Ready);
        }
        Ok(Readiness::NotReady)
    }

    fn step(&mut self, events: Events<'_>, out: &mut StepOutput) -> Result<(), ProcessError> {
        self.steps.fetch_add(1, Ordering::SeqCst);
        let messages = events.filter(|e| e.kind == EventKind::Message).count();
        out.receive = 100;
        out.status = if messages > 0 {
            Status::Done(pc(&messages))
        } else {
            Status::Idle
        };
        Ok(())
    }
}

#[test]
fn a_process_that_is_not_ready_waits_for_its_waker_without_being_stepped() {
    let scheduler = Scheduler::builder().workers(2).build().unwrap();
    let open = Arc::new(AtomicBool::new(true));
    let waker = Arc::new(Mutex::new(None));
    let prepared = Arc::new(AtomicUsize::new(0));
    let steps = Arc::new(AtomicUsize::new(0));
    let process = Gated {
        open: Arc::clone(&open),
        waker: Arc::clone(&waker),
        prepared: Arc::clone(&prepared),
        steps: Arc::clone(&steps),
    };
    let (tx, rx) = unbounded();
    let pid = scheduler
        .spawn_with(Spawn::new(process, "gated", Payload::empty()).notify(tx))
        .unwrap();
    // Its first step: idle, asking for messages. Then the gate closes.
    while steps.load(Ordering::SeqCst) < 1 {
        std::thread::yield_now();
    }
    open.store(false, Ordering::SeqCst);
    for n in 0..50u32 {
        scheduler.send(pid, pc(&n)).unwrap();
    }
    // Fifty messages arrived; it is not stepped while it cannot.
    while waker.lock().is_none() {
        std::thread::yield_now();
    }
    assert_eq!(steps.load(Ordering::SeqCst), 1);
    assert!(rx.try_recv().is_err());
    // It was asked again only when something arrived while it was being asked (at most once per
    // message), never in a loop.
    let asked = prepared.load(Ordering::SeqCst);
    assert!(asked <= 51, "asked {asked} times");
    open.store(true, Ordering::SeqCst);
    waker.lock().as_ref().unwrap().wake();
    let (_, result) = rx.recv_timeout(PATIENCE).unwrap();
    assert_eq!(
        de::<usize>(&result.unwrap()),
        32,
        "one budget of messages in one step"
    );
    assert_eq!(steps.load(Ordering::SeqCst), 2);
}

#[test]
fn a_waiting_process_can_still_be_terminated() {
    let scheduler = Scheduler::builder().workers(1).build().unwrap();
    let process = Gated {
        open: Arc::new(AtomicBool::new(false)),
        waker: Arc::default(),
        prepared: Arc::default(),
        steps: Arc::default(),
    };
    let handle = scheduler
        .spawn_handle(process, "gated", Payload::empty())
        .unwrap();
    scheduler.terminate(handle.pid(), "enough").unwrap();
    let error = handle.wait_timeout(PATIENCE).unwrap().unwrap_err();
    assert_eq!(
        (error.kind(), error.message()),
        (FailureKind::Terminated, "enough")
    );
}

/// Spawns `n` processes from outside the workers that each count themselves done in `done` and
/// finish with their index; their results arrive on the receiver returned.
fn spawn_quick(
    scheduler: &Scheduler,
    done: &Arc<AtomicUsize>,
    n: u64,
) -> crossbeam_channel::Receiver<(Pid, wfhost_scheduler::ProcessResult)> {
    let (tx, rx) = unbounded();
    for i in 0..n {
        let done = Arc::clone(done);
        let quick = Proc::new((), move |_, env, _, out| {
            done.fetch_add(1, Ordering::SeqCst);
            out.status = Status::Done(env.input.clone());
        });
        scheduler
            .spawn_with(Spawn::new(quick, "quick", pc(&i)).notify(tx.clone()))
            .unwrap();
    }
    rx
}

/// A process whose every step takes longer than a turn's time slice (a hog asking to run again
/// each time) does not hold its worker: the processes queued meanwhile all run before its next
/// step.
#[test]
fn a_process_that_overran_its_time_slice_waits_behind_the_others() {
    let scheduler = Scheduler::builder().workers(1).build().unwrap();
    let quick_done = Arc::new(AtomicUsize::new(0));
    // How many quick processes had finished when the hog's second step began.
    let (second_step, seen_at_second_step) = unbounded();
    let (started, running) = unbounded();
    let (queued, all_queued) = unbounded::<()>();
    let hog = {
        let quick_done = Arc::clone(&quick_done);
        let mut steps = 0;
        Proc::new((), move |_, _, _, out| {
            steps += 1;
            out.status = Status::Continue;
            match steps {
                1 => {
                    started.send(()).unwrap();
                    // The others are queued while this step runs; then it works on past a
                    // turn's slice.
                    all_queued.recv_timeout(PATIENCE).unwrap();
                    std::thread::sleep(Duration::from_millis(50));
                }
                _ => {
                    second_step.send(quick_done.load(Ordering::SeqCst)).unwrap();
                    out.status = Status::Done(Payload::empty());
                }
            }
        })
    };
    let hog = scheduler
        .spawn_handle(hog, "hog", Payload::empty())
        .unwrap();
    running.recv_timeout(PATIENCE).unwrap();
    let rx = spawn_quick(&scheduler, &quick_done, 50);
    queued.send(()).unwrap();
    let mut sum = 0;
    for _ in 0..50 {
        sum += de::<u64>(&rx.recv_timeout(PATIENCE).unwrap().1.unwrap());
    }
    hog.wait_timeout(PATIENCE).unwrap().unwrap();
    assert_eq!(sum, 49 * 50 / 2);
    // A hog that kept its worker would have stepped again before any of them ran.
    assert_eq!(seen_at_second_step.recv_timeout(PATIENCE), Ok(50));
}

/// Two processes whose turns each stay under the time slice, each waking the other at once at
/// the end of its turn (a message), run up a charge all the same: once their turns add up to the
/// slice they go behind the others, so processes queued meanwhile run within a few of their steps.
/// (Counted by turns, the pair would have the worker to itself, and new processes would start one
/// per 61 of their turns.)
#[test]
fn processes_whose_short_turns_add_up_to_the_slice_wait_behind_the_others() {
    const QUICK: usize = 50;
    const MOST_STEPS: usize = 2_000;
    let scheduler = Scheduler::builder().workers(1).build().unwrap();
    let quick_done = Arc::new(AtomicUsize::new(0));
    let hog_steps = Arc::new(AtomicUsize::new(0));
    let (started, running) = unbounded();
    // Each step: most of a slice, then a message to the partner (its pid is the input, or the
    // first message), then a wait for the partner's.
    let hog = |first: bool| {
        let quick_done = Arc::clone(&quick_done);
        let hog_steps = Arc::clone(&hog_steps);
        let started = started.clone();
        Proc::new(None::<Pid>, move |partner, env, events, out| {
            let steps = hog_steps.fetch_add(1, Ordering::SeqCst) + 1;
            for event in events.as_slice() {
                if event.kind == EventKind::Message && partner.is_none() {
                    *partner = Some(event.from);
                }
            }
            if env.first && !first {
                *partner = Some(de::<Pid>(&env.input));
                started.send(()).unwrap();
            }
            if quick_done.load(Ordering::SeqCst) == QUICK || steps >= MOST_STEPS {
                out.status = Status::Done(Payload::empty());
                return;
            }
            out.receive = 1;
            out.status = Status::Idle;
            let Some(partner) = *partner else { return };
            std::thread::sleep(Duration::from_millis(7));
            out.push(
                Tag(steps as u64),
                Command::Send(SendRequest {
                    to: partner,
                    message: Payload::empty(),
                }),
            );
        })
    };
    let first = scheduler
        .spawn_handle(hog(true), "ping", Payload::empty())
        .unwrap();
    let second = scheduler
        .spawn_handle(hog(false), "pong", pc(&first.pid()))
        .unwrap();
    running.recv_timeout(PATIENCE).unwrap();
    let rx = spawn_quick(&scheduler, &quick_done, QUICK as u64);
    // The pair's step under way when the last was queued.
    let queued_at = hog_steps.load(Ordering::SeqCst);
    let mut sum = 0;
    for _ in 0..QUICK {
        sum += de::<u64>(&rx.recv_timeout(PATIENCE).unwrap().1.unwrap());
    }
    let stepped_meanwhile = hog_steps.load(Ordering::SeqCst) - queued_at;
    assert_eq!(sum, 49 * 50 / 2);
    // Each one's charge reaches the slice within two steps of 7 ms (three, read with a coarse
    // clock), then the queued processes all run before its next step.
    assert!(
        stepped_meanwhile <= 6,
        "the pair stepped {stepped_meanwhile} times while {QUICK} processes waited"
    );
    // The one that steps first after that finishes; the other waits for its message for ever.
    for pair in [first, second] {
        let _ = scheduler.terminate(pair.pid(), "enough");
        pair.wait_timeout(PATIENCE).unwrap().ok();
    }
}

/// A spawner for the tests below: `child` processes that nap (sleep) for their input's
/// milliseconds, and report being cancelled the way the SDK does.
struct Nappers;

impl Spawner for Nappers {
    fn process(
        &self,
        _parent: Pid,
        _lineage: Option<&(dyn std::any::Any + Send + Sync)>,
        _note: Option<wfhost_scheduler::Note>,
        request: SpawnRequest,
    ) -> Result<Spawn, wfcontract::CommandError> {
        let napper = Proc::new((), |_, env, events, out| {
            let cancelled = events
                .as_slice()
                .iter()
                .any(|e| e.kind == EventKind::Cancel);
            if cancelled {
                out.status =
                    Status::Cancelled("entry point 'nap' stopped: it was cancelled".into());
            } else if env.first {
                let millis: u64 = de(&env.input);
                out.push(Tag(1), Command::Sleep(Duration::from_millis(millis)));
            } else {
                out.status = Status::Done(pc(&"rested"));
            }
        });
        Ok(Spawn::new(napper, request.entry, request.input))
    }
}

#[test]
fn a_cancelled_child_joins_as_child_cancelled_naming_itself_once() {
    let scheduler = Scheduler::builder()
        .workers(2)
        .spawner(Nappers)
        .build()
        .unwrap();
    let parent = Proc::new(None::<Pid>, |child, _, events, out| {
        for event in events {
            match event.tag {
                Tag(1) => {
                    let pid: Pid = de(&event.data);
                    *child = Some(pid);
                    out.push(Tag(2), Command::Cancel(pid));
                    out.push(Tag(3), Command::Join(pid));
                }
                Tag(3) => {
                    let error = event.error.expect("the child was cancelled");
                    out.status = Status::Done(pc(&(error.kind.name(), error.message)));
                    return;
                }
                _ => {}
            }
        }
        if child.is_none() {
            out.push(
                Tag(1),
                Command::Spawn(SpawnRequest {
                    module: None,
                    entry: "nap".into(),
                    input: pc(&60_000u64),
                }),
            );
        }
        out.status = Status::Wait;
    });
    let handle = scheduler
        .spawn_handle(parent, "parent", Payload::empty())
        .unwrap();
    let (kind, message): (String, String) = de(&handle.wait_timeout(PATIENCE).unwrap().unwrap());
    assert_eq!(kind, "child-cancelled");
    assert_eq!(
        message,
        format!(
            "process {} was stopped: entry point 'nap' stopped: it was cancelled",
            Pid(handle.pid().0 + 1)
        )
    );
}

/// A child whose failure already names it (as a wasm process's does) is not named twice.
#[test]
fn a_failure_that_names_its_process_is_not_prefixed_again() {
    let scheduler = Scheduler::builder().workers(1).build().unwrap();
    let parent = Proc::new((), |_, env, events, out| {
        if env.first {
            out.push(Tag(1), Command::Join(Pid(env.pid.unwrap().0 + 1)));
            out.status = Status::Wait;
            return;
        }
        let error = events.into_iter().next().unwrap().error.unwrap();
        out.status = Status::Done(pc(&(error.kind == ErrorKind::ChildFailed, error.message)));
    });
    let parent = scheduler
        .spawn_handle(parent, "parent", Payload::empty())
        .unwrap();
    let child_pid = Pid(parent.pid().0 + 1);
    let child = Proc::new((), move |_, _, _, out| {
        out.status = Status::Failed(format!("process {child_pid} (entry point 'x') trapped"));
    });
    let (tx, rx) = unbounded();
    scheduler
        .spawn_with(Spawn::new(child, "x", Payload::empty()).notify(tx))
        .unwrap();
    rx.recv_timeout(PATIENCE).unwrap().1.unwrap_err();
    let (failed, message): (bool, String) = de(&parent.wait_timeout(PATIENCE).unwrap().unwrap());
    assert!(failed);
    assert_eq!(
        message,
        format!("process {child_pid} (entry point 'x') trapped")
    );
}

#[test]
fn messages_to_the_host_reach_the_outbox_of_the_process_started_and_its_children() {
    let scheduler = Scheduler::builder()
        .workers(2)
        .spawner(Nappers)
        .build()
        .unwrap();
    let (outbox, messages) = wfhost_scheduler::outbox(100, 1 << 20);
    let process = Proc::new(0u8, |stage, _, _, out| {
        *stage += 1;
        if *stage == 1 {
            for n in 0..3u32 {
                out.push(
                    Tag(u64::from(n) + 1),
                    Command::Send(SendRequest {
                        to: Pid::HOST,
                        message: pc(&n),
                    }),
                );
            }
            out.status = Status::Wait;
        } else {
            out.status = Status::Done(Payload::empty());
        }
    });
    let (tx, rx) = unbounded();
    scheduler
        .spawn_with(
            Spawn::new(process, "reporter", Payload::empty())
                .notify(tx)
                .outbox(outbox),
        )
        .unwrap();
    rx.recv_timeout(PATIENCE).unwrap().1.unwrap();
    let got: Vec<u32> = (0..3)
        .map(|_| de(&messages.recv_timeout(PATIENCE).unwrap().1))
        .collect();
    assert_eq!(got, [0, 1, 2]);
    assert!(messages.try_recv().is_none());

    // Without an outbox, a message to the host is refused with a reason.
    let lonely = Proc::new((), |_, env, events, out| {
        if env.first {
            out.push(
                Tag(1),
                Command::Send(SendRequest {
                    to: Pid::HOST,
                    message: Payload::empty(),
                }),
            );
            out.status = Status::Wait;
            return;
        }
        let error = events.into_iter().next().unwrap().error.unwrap();
        out.status = Status::Done(pc(&error.kind.name()));
    });
    let handle = scheduler
        .spawn_handle(lonely, "lonely", Payload::empty())
        .unwrap();
    let kind: String = de(&handle.wait_timeout(PATIENCE).unwrap().unwrap());
    assert_eq!(kind, "no-such-process");
}

#[test]
fn a_process_past_its_timeout_ends_with_timeout() {
    let scheduler = Scheduler::builder().workers(1).build().unwrap();
    let forever = Proc::new((), |_, _, _, out| out.status = Status::Idle);
    let (tx, rx) = unbounded();
    scheduler
        .spawn_with(
            Spawn::new(forever, "forever", Payload::empty())
                .notify(tx)
                .timeout(Duration::from_millis(50)),
        )
        .unwrap();
    let error = rx.recv_timeout(PATIENCE).unwrap().1.unwrap_err();
    assert_eq!(error.kind(), FailureKind::Timeout);
    assert_eq!(
        error.message(),
        "timed out: it ran longer than its timeout of 50ms"
    );
    assert_eq!(scheduler.live(), 0);
}

#[test]
fn a_step_reporting_cancelled_ends_the_process_as_cancelled() {
    let scheduler = Scheduler::builder().workers(1).build().unwrap();
    let process = Proc::new((), |_, _, events, out| {
        out.status = if events
            .as_slice()
            .iter()
            .any(|e| e.kind == EventKind::Cancel)
        {
            Status::Cancelled("stopped as asked".into())
        } else {
            Status::Idle
        };
    });
    let handle = scheduler
        .spawn_handle(process, "p", Payload::empty())
        .unwrap();
    scheduler.cancel(handle.pid()).unwrap();
    let error = handle.wait_timeout(PATIENCE).unwrap().unwrap_err();
    assert_eq!(
        (error.kind(), error.message()),
        (FailureKind::Cancelled, "stopped as asked")
    );
}
