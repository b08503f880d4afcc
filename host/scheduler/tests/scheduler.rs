//! Behaviour of the scheduler with native processes: exact counts, no sleeps as synchronisation.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{de, pc, Proc, PATIENCE};
use crossbeam_channel::{unbounded, Receiver, Sender};
use parking_lot::Mutex;
use wfcontract::{
    CallRequest, Command, CommandKind, ErrorKind, EventKind, Payload, Pid, SendRequest, Status, Tag,
};
use wfhost_scheduler::{
    Completer, Error, ProcessResult, Scheduler, SchedulerHandle, Spawn, DEFAULT_BUDGET,
};

fn call(name: &str) -> Command {
    Command::Call(CallRequest {
        name: name.into(),
        input: Payload::empty(),
    })
}

/// Hands the completer of every `call` to the returned channel.
fn forward_calls(
    builder: wfhost_scheduler::Builder,
) -> (wfhost_scheduler::Builder, Receiver<Completer>) {
    let (tx, rx) = unbounded();
    let tx = Mutex::new(tx);
    let builder = builder.handler(
        CommandKind::Call,
        move |req: wfhost_scheduler::Request, cx: &wfhost_scheduler::Context<'_>| {
            tx.lock().send(cx.completer(req.tag)).unwrap();
        },
    );
    (builder, rx)
}

/// A scheduler whose `call`s wait for the test to complete them.
fn with_gate(workers: usize) -> (Scheduler, Receiver<Completer>) {
    let (builder, rx) = forward_calls(Scheduler::builder().workers(workers));
    (builder.build().unwrap(), rx)
}

/// A scheduler whose `call`s are completed by `threads` threads of their own, as a service on
/// other threads would: completions race the steps. Join the threads after shutdown.
fn with_echo_service(
    builder: wfhost_scheduler::Builder,
    threads: usize,
) -> (Scheduler, Vec<std::thread::JoinHandle<()>>) {
    let (builder, rx) = forward_calls(builder);
    let completing = (0..threads)
        .map(|_| {
            let rx = rx.clone();
            std::thread::spawn(move || {
                for completer in rx {
                    completer.complete(Ok(Payload::empty()));
                }
            })
        })
        .collect();
    (builder.build().unwrap(), completing)
}

/// Occupies the only worker of a one-worker scheduler until `release` is called, so the test can
/// arrange queues and inboxes while nothing runs.
struct HeldWorker {
    barrier: Arc<Barrier>,
}

impl HeldWorker {
    fn hold(scheduler: &Scheduler) -> HeldWorker {
        assert_eq!(scheduler.workers(), 1);
        let barrier = Arc::new(Barrier::new(2));
        let (inside_tx, inside_rx) = unbounded();
        let in_step = Arc::clone(&barrier);
        let blocker = Proc::new((), move |_, _, _, out| {
            inside_tx.send(()).unwrap();
            in_step.wait();
            out.status = Status::Done(Payload::empty());
        });
        scheduler.spawn(blocker, "hold", Payload::empty()).unwrap();
        inside_rx.recv_timeout(PATIENCE).unwrap();
        HeldWorker { barrier }
    }

    fn release(self) {
        self.barrier.wait();
    }
}

fn collect(rx: &Receiver<(Pid, ProcessResult)>, n: usize) -> Vec<ProcessResult> {
    (0..n)
        .map(|i| {
            rx.recv_timeout(PATIENCE)
                .unwrap_or_else(|_| panic!("only {i} of {n} processes finished"))
                .1
        })
        .collect()
}

#[test]
fn smoke_hundred_thousand_processes_sum_exactly() {
    const N: u64 = 100_000;
    let scheduler = Scheduler::builder().build().unwrap();
    let (tx, rx) = unbounded();
    for i in 0..N {
        // Two steps each: one that asks to run again, one that answers.
        let process = Proc::new(0u8, |turns, env, _, out| {
            *turns += 1;
            out.status = if *turns == 1 {
                Status::Continue
            } else {
                Status::Done(pc(&(de::<u64>(&env.input) * 2)))
            };
        });
        scheduler
            .spawn_with(Spawn::new(process, "double", pc(&i)).notify(tx.clone()))
            .unwrap();
    }
    let sum: u64 = collect(&rx, N as usize)
        .into_iter()
        .map(|r| de::<u64>(&r.unwrap()))
        .sum();
    assert_eq!(sum, N * (N - 1));
    let counters = scheduler.counters();
    assert_eq!(counters.spawns, N);
    assert_eq!(counters.completions, N);
    assert_eq!(counters.steps, 2 * N);
    assert_eq!(scheduler.live(), 0);
}

#[test]
fn a_result_is_delivered_only_after_its_process_is_counted_out() {
    // Whoever receives a result sees the process gone from `live` and counted in `completions`:
    // a caller may assert on either right after `wait`.
    const N: u64 = 5_000;
    let scheduler = Scheduler::builder().workers(2).build().unwrap();
    let (tx, rx) = unbounded();
    for i in 0..N {
        let process = Proc::new((), |_, env, _, out| {
            out.status = Status::Done(env.input.clone());
        });
        scheduler
            .spawn_with(Spawn::new(process, "echo", pc(&i)).notify(tx.clone()))
            .unwrap();
        let (_, result) = rx.recv().unwrap();
        assert_eq!(de::<u64>(&result.unwrap()), i);
        assert_eq!(scheduler.live(), 0, "after result {i}");
        assert_eq!(scheduler.counters().completions, i + 1, "after result {i}");
    }
}

/// A ring member: its first message names the next member; every later one is the token, carrying
/// the hops still to go after this one.
fn ring_member(finished: Sender<()>) -> Proc<(Option<Pid>, u64)> {
    Proc::new((None, 0u64), move |(next, handled), _, events, out| {
        out.status = Status::Idle;
        for event in events {
            match event.kind {
                EventKind::Message => match *next {
                    None => *next = Some(de(&event.data)),
                    Some(to) => {
                        *handled += 1;
                        let remaining: u64 = de(&event.data);
                        if remaining == 0 {
                            finished.send(()).unwrap();
                        } else {
                            let message = pc(&(remaining - 1));
                            out.push(Tag(1), Command::Send(SendRequest { to, message }));
                        }
                    }
                },
                EventKind::YieldComplete => assert_eq!(event.error, None),
                EventKind::Cancel => {
                    out.status = Status::Done(pc(handled));
                    return;
                }
            }
        }
    })
}

#[test]
fn ring_of_a_thousand_passes_a_million_hops_exactly() {
    const MEMBERS: usize = 1_000;
    const HOPS: u64 = 1_000_000;
    let scheduler = Scheduler::builder().build().unwrap();
    let (done_tx, done_rx) = unbounded();
    let (finished_tx, finished_rx) = unbounded();
    let pids: Vec<Pid> = (0..MEMBERS)
        .map(|_| {
            let spawn = Spawn::new(ring_member(finished_tx.clone()), "member", Payload::empty());
            scheduler.spawn_with(spawn.notify(done_tx.clone())).unwrap()
        })
        .collect();
    for (i, pid) in pids.iter().enumerate() {
        scheduler.send(*pid, pc(&pids[(i + 1) % MEMBERS])).unwrap();
    }
    scheduler.send(pids[0], pc(&(HOPS - 1))).unwrap();
    finished_rx
        .recv_timeout(PATIENCE)
        .expect("the token went round");

    let report = scheduler.shutdown(PATIENCE);
    assert_eq!(report.finished_in_grace, MEMBERS);
    let hops: u64 = collect(&done_rx, MEMBERS)
        .into_iter()
        .map(|r| de::<u64>(&r.unwrap()))
        .sum();
    assert_eq!(hops, HOPS);
}

#[test]
fn eight_producers_keep_their_order_and_lose_nothing() {
    const PRODUCERS: u8 = 8;
    const EACH: u64 = 100_000;
    const TOTAL: u64 = PRODUCERS as u64 * EACH;
    let scheduler = Scheduler::builder().build().unwrap();
    let receiver = Proc::new(
        ([0u64; PRODUCERS as usize], 0u64, 0u64),
        |(next, total, out_of_order), _, events, out| {
            out.status = Status::Idle;
            for event in events {
                let (producer, seq): (u8, u64) = de(&event.data);
                if next[producer as usize] != seq {
                    *out_of_order += 1;
                }
                next[producer as usize] = seq + 1;
                *total += 1;
            }
            if *total == TOTAL {
                out.status = Status::Done(pc(&(*total, *out_of_order)));
            }
        },
    );
    let handle = scheduler
        .spawn_handle(receiver, "receive", Payload::empty())
        .unwrap();
    let pid = handle.pid();
    std::thread::scope(|scope| {
        for producer in 0..PRODUCERS {
            let scheduler = scheduler.handle().clone();
            scope.spawn(move || {
                for seq in 0..EACH {
                    scheduler.send(pid, pc(&(producer, seq))).unwrap();
                }
            });
        }
    });
    let result = handle.wait_timeout(PATIENCE).expect("all messages arrived");
    assert_eq!(de::<(u64, u64)>(&result.unwrap()), (TOTAL, 0));
}

#[test]
fn stampede_never_steps_one_process_twice_at_once() {
    const PROCESSES: usize = 16;
    const PRODUCERS: usize = 8;
    const MESSAGES_EACH: usize = 20_000;
    const PER_PROCESS: u64 = (PRODUCERS * MESSAGES_EACH / PROCESSES) as u64;
    // Every message is answered by a yield that another thread completes, so completions race
    // the steps as well as messages.
    let (scheduler, completing) = with_echo_service(Scheduler::builder(), 2);

    let overlaps = Arc::new(AtomicU64::new(0));
    let (tx, rx) = unbounded();
    let pids: Vec<Pid> = (0..PROCESSES)
        .map(|_| {
            let in_step = AtomicBool::new(false);
            let overlaps = Arc::clone(&overlaps);
            let process = Proc::new(
                (0u64, 0u64),
                move |(messages, completions), _, events, out| {
                    if in_step.swap(true, Ordering::AcqRel) {
                        overlaps.fetch_add(1, Ordering::Relaxed);
                    }
                    for event in events {
                        match event.kind {
                            EventKind::Message => {
                                *messages += 1;
                                out.push(Tag(*messages), call("echo"));
                            }
                            EventKind::YieldComplete => *completions += 1,
                            EventKind::Cancel => {}
                        }
                    }
                    out.status = if *messages == PER_PROCESS && *completions == PER_PROCESS {
                        Status::Done(pc(&(*messages, *completions)))
                    } else if completions < messages {
                        // Calls outstanding: their completions must wake it.
                        Status::Wait
                    } else {
                        Status::Idle
                    };
                    in_step.store(false, Ordering::Release);
                },
            );
            let spawn = Spawn::new(process, "stampede", Payload::empty()).notify(tx.clone());
            scheduler.spawn_with(spawn).unwrap()
        })
        .collect();
    std::thread::scope(|scope| {
        for producer in 0..PRODUCERS {
            let scheduler = scheduler.handle().clone();
            let pids = &pids;
            scope.spawn(move || {
                for i in 0..MESSAGES_EACH {
                    let pid = pids[(i + producer) % PROCESSES];
                    scheduler.send(pid, Payload::empty()).unwrap();
                }
            });
        }
    });
    for result in collect(&rx, PROCESSES) {
        assert_eq!(
            de::<(u64, u64)>(&result.unwrap()),
            (PER_PROCESS, PER_PROCESS)
        );
    }
    assert_eq!(overlaps.load(Ordering::Relaxed), 0);
    scheduler.shutdown(Duration::from_secs(1));
    for thread in completing {
        thread.join().unwrap();
    }
}

#[test]
fn a_million_completions_race_steps_without_a_lost_wakeup() {
    const PROCESSES: u64 = 1_000;
    const EACH: u64 = 1_000;
    const IN_FLIGHT: u64 = 8;
    let (scheduler, completing) = with_echo_service(Scheduler::builder(), 3);

    let (tx, rx) = unbounded();
    for _ in 0..PROCESSES {
        // Keeps IN_FLIGHT calls outstanding until EACH have completed.
        let process = Proc::new((0u64, 0u64), |(issued, completed), env, events, out| {
            for event in events {
                assert_eq!(event.kind, EventKind::YieldComplete);
                *completed += 1;
            }
            let target = if env.first {
                IN_FLIGHT
            } else {
                *completed + IN_FLIGHT
            };
            while *issued < target.min(EACH) {
                *issued += 1;
                out.push(Tag(*issued), call("echo"));
            }
            out.status = if *completed == EACH {
                Status::Done(pc(completed))
            } else {
                Status::Wait
            };
        });
        let spawn = Spawn::new(process, "race", Payload::empty()).notify(tx.clone());
        scheduler.spawn_with(spawn).unwrap();
    }
    let total: u64 = collect(&rx, PROCESSES as usize)
        .into_iter()
        .map(|r| de::<u64>(&r.unwrap()))
        .sum();
    assert_eq!(total, PROCESSES * EACH);
    scheduler.shutdown(Duration::from_secs(1));
    for thread in completing {
        thread.join().unwrap();
    }
}

/// Counts the messages a process sees before its cancel; `pause_at_first` holds the step at the
/// first message until the test lets it go.
fn count_until_cancel(pause_at_first: Option<(Sender<()>, Arc<Barrier>)>) -> Proc<u64> {
    Proc::new(0u64, move |seen, _, events, out| {
        out.status = Status::Idle;
        for event in events {
            match event.kind {
                EventKind::Message => {
                    *seen += 1;
                    if let (1, Some((at_first, resume))) = (*seen, &pause_at_first) {
                        at_first.send(()).unwrap();
                        resume.wait();
                    }
                }
                EventKind::Cancel => {
                    out.status = Status::Done(pc(seen));
                    return;
                }
                EventKind::YieldComplete => {}
            }
        }
    })
}

#[test]
fn cancel_overtakes_ten_thousand_queued_messages() {
    let scheduler = Scheduler::builder().workers(1).build().unwrap();
    let handle = scheduler
        .spawn_handle(count_until_cancel(None), "count", Payload::empty())
        .unwrap();
    // Nothing runs while the backlog and then the cancel are queued.
    let held = HeldWorker::hold(&scheduler);
    for _ in 0..10_000 {
        scheduler.send(handle.pid(), Payload::empty()).unwrap();
    }
    scheduler.cancel(handle.pid()).unwrap();
    held.release();
    let seen: u64 = de(&handle.wait_timeout(PATIENCE).unwrap().unwrap());
    // The control lane is drained first: the cancel leads the first batch.
    assert_eq!(seen, 0);
}

#[test]
fn cancel_during_a_backlog_lets_at_most_one_budget_through() {
    let scheduler = Scheduler::builder().workers(1).build().unwrap();
    let (at_first_tx, at_first_rx) = unbounded();
    let resume = Arc::new(Barrier::new(2));
    let process = count_until_cancel(Some((at_first_tx, Arc::clone(&resume))));
    let handle = scheduler
        .spawn_handle(process, "count", Payload::empty())
        .unwrap();
    let held = HeldWorker::hold(&scheduler);
    for _ in 0..10_000 {
        scheduler.send(handle.pid(), Payload::empty()).unwrap();
    }
    held.release();
    // The cancel lands while the first batch is being stepped.
    at_first_rx.recv_timeout(PATIENCE).unwrap();
    scheduler.cancel(handle.pid()).unwrap();
    resume.wait();
    let seen: u64 = de(&handle.wait_timeout(PATIENCE).unwrap().unwrap());
    // The batch in progress finishes; the next one starts with the cancel.
    assert_eq!(seen, DEFAULT_BUDGET as u64);
}

#[test]
fn a_process_over_budget_goes_behind_its_peers() {
    const BACKLOG: u64 = 1_000;
    let scheduler = Scheduler::builder().workers(1).build().unwrap();
    let log = Arc::new(Mutex::new(Vec::<char>::new()));
    let logger = |name: char, expect: u64| {
        let log = Arc::clone(&log);
        Proc::new(0u64, move |seen, _, events, out| {
            out.status = Status::Idle;
            for _ in events {
                *seen += 1;
                log.lock().push(name);
            }
            if *seen == expect {
                out.status = Status::Done(Payload::empty());
            }
        })
    };
    let a = scheduler
        .spawn_handle(logger('a', BACKLOG), "a", Payload::empty())
        .unwrap();
    let b = scheduler
        .spawn_handle(logger('b', 1), "b", Payload::empty())
        .unwrap();
    let held = HeldWorker::hold(&scheduler);
    // A gets a backlog and is queued first; B gets one message.
    for _ in 0..BACKLOG {
        scheduler.send(a.pid(), Payload::empty()).unwrap();
    }
    scheduler.send(b.pid(), Payload::empty()).unwrap();
    held.release();
    a.wait_timeout(PATIENCE).unwrap().unwrap();
    b.wait_timeout(PATIENCE).unwrap().unwrap();
    let log = log.lock();
    assert_eq!(log.len() as u64, BACKLOG + 1);
    // One budget of A's messages, then A goes behind B.
    assert_eq!(
        log.iter().position(|name| *name == 'b'),
        Some(DEFAULT_BUDGET)
    );
}

#[test]
fn a_panicking_step_fails_only_its_process() {
    let scheduler = Scheduler::builder().workers(1).build().unwrap();
    let boom = Proc::new((), |_, _, _, _| panic!("boom"));
    let failed = scheduler
        .spawn_handle(boom, "boom", Payload::empty())
        .unwrap();
    let err = failed.wait_timeout(PATIENCE).unwrap().unwrap_err();
    assert_eq!(err.message(), "step panicked: boom");
    // The single worker survived and runs the next process.
    let fine = Proc::new((), |_, _, _, out| out.status = Status::Done(pc(&7u8)));
    let ok = scheduler
        .spawn_handle(fine, "fine", Payload::empty())
        .unwrap();
    assert_eq!(de::<u8>(&ok.wait_timeout(PATIENCE).unwrap().unwrap()), 7);
}

#[test]
fn a_panicking_init_or_handler_fails_its_process() {
    struct BadInit;
    impl wfhost_scheduler::Process for BadInit {
        fn init(
            &mut self,
            _: &wfhost_scheduler::InitContext,
            method: &str,
            _: Payload,
        ) -> Result<(), wfhost_scheduler::ProcessError> {
            panic!("no entry point {method}")
        }
        fn step(
            &mut self,
            _: wfhost_scheduler::Events<'_>,
            _: &mut wfcontract::StepOutput,
        ) -> Result<(), wfhost_scheduler::ProcessError> {
            unreachable!()
        }
    }
    let scheduler = Scheduler::builder()
        .workers(1)
        .handler(
            CommandKind::Call,
            |_: wfhost_scheduler::Request, _: &wfhost_scheduler::Context<'_>| panic!("handler bug"),
        )
        .build()
        .unwrap();
    let init = scheduler
        .spawn_handle(BadInit, "start", Payload::empty())
        .unwrap();
    assert_eq!(
        init.wait_timeout(PATIENCE).unwrap().unwrap_err().message(),
        "init of entry point 'start' panicked: no entry point start"
    );
    let calls = Proc::new((), |_, _, _, out| out.push(Tag(1), call("x")));
    let handler = scheduler
        .spawn_handle(calls, "calls", Payload::empty())
        .unwrap();
    assert_eq!(
        handler
            .wait_timeout(PATIENCE)
            .unwrap()
            .unwrap_err()
            .message(),
        "the handler for command 'call' panicked: handler bug"
    );
}

#[test]
fn an_unknown_command_completes_with_an_error_the_process_sees() {
    // No spawner: the scheduler cannot make processes for `spawn`.
    let scheduler = Scheduler::builder().workers(1).build().unwrap();
    let process = Proc::new((), |_, env, events, out| {
        if env.first {
            let request = wfcontract::SpawnRequest {
                module: None,
                entry: "child".into(),
                input: Payload::empty(),
            };
            out.push(Tag(9), Command::Spawn(request));
            return;
        }
        let event = events.into_iter().next().unwrap();
        let error = event.error.unwrap();
        assert_eq!((event.tag, error.kind), (Tag(9), ErrorKind::UnknownCommand));
        out.status = Status::Done(Payload::to_json(&error.message).unwrap());
    });
    let handle = scheduler
        .spawn_handle(process, "spawner", Payload::empty())
        .unwrap();
    let message: String = de(&handle.wait_timeout(PATIENCE).unwrap().unwrap());
    assert_eq!(message, "this host has no handler for command 'spawn'");
}

#[test]
fn sending_to_an_unknown_or_finished_pid_is_an_error() {
    let scheduler = Scheduler::builder().workers(1).build().unwrap();
    assert_eq!(
        scheduler.send(Pid(424242), Payload::empty()),
        Err(Error::NoSuchProcess(Pid(424242)))
    );
    let quick = Proc::new((), |_, _, _, out| {
        out.status = Status::Done(Payload::empty())
    });
    let handle = scheduler
        .spawn_handle(quick, "quick", Payload::empty())
        .unwrap();
    let pid = handle.pid();
    handle.wait_timeout(PATIENCE).unwrap().unwrap();
    assert_eq!(
        scheduler.send(pid, Payload::empty()),
        Err(Error::NoSuchProcess(pid))
    );
    assert_eq!(scheduler.cancel(pid), Err(Error::NoSuchProcess(pid)));

    // A process sending to a finished pid gets the error as a completion.
    let sender = Proc::new((), move |_, env, events, out| {
        if env.first {
            let message = Payload::empty();
            out.push(Tag(1), Command::Send(SendRequest { to: pid, message }));
            return;
        }
        let error = events.into_iter().next().unwrap().error.unwrap();
        out.status = Status::Done(pc(&(error.kind == ErrorKind::NoSuchProcess)));
    });
    let handle = scheduler
        .spawn_handle(sender, "send", Payload::empty())
        .unwrap();
    assert!(de::<bool>(&handle.wait_timeout(PATIENCE).unwrap().unwrap()));
}

/// A parent that joins the child named in its input, whether it already finished or not.
fn joiner() -> Proc<()> {
    Proc::new((), |_, _, events, out| {
        out.status = Status::Idle;
        for event in events {
            match event.kind {
                EventKind::Message => {
                    out.push(Tag(5), Command::Join(de(&event.data)));
                    out.status = Status::Wait;
                }
                EventKind::YieldComplete => {
                    out.status = Status::Done(match event.into_result() {
                        Ok(data) => data,
                        Err(error) => Payload::to_json(&error.to_string()).unwrap(),
                    });
                    return;
                }
                EventKind::Cancel => {}
            }
        }
    })
}

#[test]
fn a_parent_joins_its_child_before_or_after_the_child_finished() {
    let (scheduler, gates) = with_gate(2);
    for late in [false, true] {
        let parent = scheduler
            .spawn_handle(joiner(), "parent", Payload::empty())
            .unwrap();
        let child = Proc::new((), |_, env, _, out| {
            if env.first {
                out.push(Tag(1), call("gate"));
            } else {
                out.status = Status::Done(pc(&99u32));
            }
        });
        let (tx, rx) = unbounded();
        let spawn = Spawn::new(child, "child", Payload::empty())
            .parent(parent.pid())
            .notify(tx);
        let child = scheduler.spawn_with(spawn).unwrap();
        let gate = gates.recv_timeout(PATIENCE).unwrap();
        if late {
            gate.complete(Ok(Payload::empty()));
            rx.recv_timeout(PATIENCE).unwrap().1.unwrap();
            // Finished, but retained for its parent.
            scheduler.send(parent.pid(), pc(&child)).unwrap();
        } else {
            scheduler.send(parent.pid(), pc(&child)).unwrap();
            gate.complete(Ok(Payload::empty()));
        }
        assert_eq!(
            de::<u32>(&parent.wait_timeout(PATIENCE).unwrap().unwrap()),
            99
        );
    }
    // Joined children are reaped: nothing is left behind.
    assert_eq!(scheduler.live(), 0);
}

#[test]
fn a_failed_child_is_an_error_value_for_its_parent() {
    let scheduler = Scheduler::builder().workers(2).build().unwrap();
    let parent = scheduler
        .spawn_handle(joiner(), "parent", Payload::empty())
        .unwrap();
    let child = Proc::new((), |_, _, _, out| {
        out.status = Status::Failed("out of stock".into())
    });
    let spawn = Spawn::new(child, "child", Payload::empty()).parent(parent.pid());
    let child = scheduler.spawn_with(spawn).unwrap();
    scheduler.send(parent.pid(), pc(&child)).unwrap();
    let message: String = de(&parent.wait_timeout(PATIENCE).unwrap().unwrap());
    assert_eq!(
        message,
        format!("process {child} failed: out of stock (child-failed)")
    );
}

#[test]
fn joining_an_unknown_pid_is_an_error() {
    let scheduler = Scheduler::builder().workers(1).build().unwrap();
    let parent = scheduler
        .spawn_handle(joiner(), "parent", Payload::empty())
        .unwrap();
    scheduler.send(parent.pid(), pc(&Pid(777))).unwrap();
    let message: String = de(&parent.wait_timeout(PATIENCE).unwrap().unwrap());
    assert_eq!(
        message,
        "no process <777>: it never existed or has already finished (no-such-process)"
    );
}

#[test]
fn sleeps_run_on_the_timer_and_complete_in_deadline_order() {
    let scheduler = Scheduler::builder().workers(2).build().unwrap();
    let (tx, rx) = unbounded();
    let start = Instant::now();
    for millis in [30u64, 10, 20] {
        let tx = tx.clone();
        let process = Proc::new((), move |_, env, _, out| {
            if env.first {
                out.push(Tag(1), Command::Sleep(Duration::from_millis(millis)));
            } else {
                tx.send(millis).unwrap();
                out.status = Status::Done(Payload::empty());
            }
        });
        scheduler.spawn(process, "sleep", Payload::empty()).unwrap();
    }
    let order: Vec<u64> = (0..3).map(|_| rx.recv_timeout(PATIENCE).unwrap()).collect();
    assert_eq!(order, [10, 20, 30]);
    assert!(start.elapsed() >= Duration::from_millis(30));
}

#[test]
fn a_stop_requested_inside_a_step_does_not_deadlock() {
    let scheduler = Scheduler::builder().workers(2).build().unwrap();
    let handle: SchedulerHandle = scheduler.handle().clone();
    let stopper = Proc::new((), move |_, _, events, out| {
        if events
            .as_slice()
            .iter()
            .any(|e| e.kind == EventKind::Cancel)
        {
            out.status = Status::Done(Payload::empty());
        } else {
            handle.request_stop();
            out.status = Status::Idle;
        }
    });
    let stopped = scheduler
        .spawn_handle(stopper, "stop", Payload::empty())
        .unwrap();
    assert!(scheduler.wait_for_stop(Some(PATIENCE)));
    assert_eq!(
        scheduler.spawn(Proc::new((), |_, _, _, _| {}), "late", Payload::empty()),
        Err(Error::ShuttingDown)
    );
    let report = scheduler.shutdown(PATIENCE);
    assert_eq!((report.closed, report.detached), (0, false));
    stopped.wait_timeout(PATIENCE).unwrap().unwrap();
}

#[test]
fn shutdown_called_inside_a_step_detaches_instead_of_joining_itself() {
    let owner: Arc<Mutex<Option<Scheduler>>> = Arc::new(Mutex::new(None));
    // The stopped hook runs on the detached thread, after every process was closed.
    let closes = Arc::new(AtomicU64::new(0));
    let (hook_tx, hook_rx) = unbounded();
    let seen = Arc::clone(&closes);
    let scheduler = Scheduler::builder()
        .workers(2)
        .on_stopped(move || {
            hook_tx
                .send((
                    seen.load(Ordering::SeqCst),
                    std::thread::current().name().map(String::from),
                ))
                .unwrap()
        })
        .build()
        .unwrap();
    let (tx, rx) = unbounded();
    let inside = Arc::clone(&owner);
    let process = Proc::new((), move |_, _, _, out| {
        if let Some(scheduler) = inside.lock().take() {
            tx.send(scheduler.shutdown(Duration::from_millis(50)))
                .unwrap();
        }
        out.status = Status::Done(Payload::empty());
    });
    let handle = scheduler.handle().clone();
    // A process that ignores cancels: the detached shutdown must still close it, once.
    let (closed_tx, closed_rx) = unbounded();
    let counted = Arc::clone(&closes);
    let stubborn = Proc::new((), |_, _, _, out| out.status = Status::Idle).on_close(move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
        closed_tx.send(()).unwrap()
    });
    let stubborn = handle
        .spawn_handle(stubborn, "stubborn", Payload::empty())
        .unwrap();
    *owner.lock() = Some(scheduler);
    handle.spawn(process, "shutdown", Payload::empty()).unwrap();
    let report = rx.recv_timeout(PATIENCE).unwrap();
    assert!(report.detached);
    assert!(handle.is_stopping());
    closed_rx
        .recv_timeout(PATIENCE)
        .expect("closed by the detached shutdown");
    let err = stubborn.wait_timeout(PATIENCE).unwrap().unwrap_err();
    assert_eq!(
        err.message(),
        "the host shut down before the process finished"
    );
    let (closed_before, thread) = hook_rx.recv_timeout(PATIENCE).expect("the hook ran");
    assert_eq!(closed_before, 1);
    assert_eq!(thread.as_deref(), Some("wfhost-shutdown"));
    // Consumed by running: its sender is gone.
    assert_eq!(
        hook_rx.try_recv(),
        Err(crossbeam_channel::TryRecvError::Disconnected)
    );
}

#[test]
fn the_stopped_hook_runs_once_before_shutdown_returns() {
    let (hook_tx, hook_rx) = unbounded();
    let scheduler = Scheduler::builder()
        .workers(2)
        .on_stopped(move || hook_tx.send(()).unwrap())
        .build()
        .unwrap();
    let handle = scheduler.handle().clone();
    let report = scheduler.shutdown(PATIENCE);
    assert!(!report.detached);
    assert_eq!(hook_rx.try_recv(), Ok(()));
    // Consumed by running: its sender is gone.
    assert!(handle.is_stopping());
    assert_eq!(
        hook_rx.try_recv(),
        Err(crossbeam_channel::TryRecvError::Disconnected)
    );
}

fn blocked_forever(closes: Arc<AtomicU64>, honour_cancel: bool) -> Proc<()> {
    Proc::new((), move |_, env, events, out| {
        out.status = Status::Wait;
        if env.first {
            out.push(Tag(1), call("never"));
        }
        if honour_cancel
            && events
                .as_slice()
                .iter()
                .any(|e| e.kind == EventKind::Cancel)
        {
            out.status = Status::Done(Payload::empty());
        }
    })
    .on_close(move |_| {
        closes.fetch_add(1, Ordering::Relaxed);
    })
}

#[test]
fn shutdown_with_ten_thousand_blocked_processes_keeps_its_deadline() {
    const N: usize = 10_000;
    for honour_cancel in [false, true] {
        // The `call` handler drops the completer: the processes stay blocked.
        let scheduler = Scheduler::builder()
            .handler(
                CommandKind::Call,
                |_: wfhost_scheduler::Request, _: &wfhost_scheduler::Context<'_>| {},
            )
            .build()
            .unwrap();
        let closes = Arc::new(AtomicU64::new(0));
        let (tx, rx) = unbounded();
        for _ in 0..N {
            let process = blocked_forever(Arc::clone(&closes), honour_cancel);
            let spawn = Spawn::new(process, "block", Payload::empty()).notify(tx.clone());
            scheduler.spawn_with(spawn).unwrap();
        }
        let grace = Duration::from_millis(if honour_cancel { 60_000 } else { 200 });
        let started = Instant::now();
        let report = scheduler.shutdown(grace);
        assert!(started.elapsed() < grace + Duration::from_secs(30));
        assert_eq!(report.live_at_start, N);
        let results = collect(&rx, N);
        if honour_cancel {
            assert_eq!((report.finished_in_grace, report.closed), (N, 0));
            assert!(results.iter().all(Result::is_ok));
        } else {
            assert_eq!((report.finished_in_grace, report.closed), (0, N));
            let err = results[0].as_ref().unwrap_err();
            assert_eq!(
                err.message(),
                "the host shut down before the process finished"
            );
        }
        assert_eq!(
            closes.load(Ordering::Relaxed),
            N as u64,
            "close runs exactly once"
        );
    }
}

#[test]
fn no_starvation_of_a_new_process_behind_endless_requeuers() {
    let scheduler = Scheduler::builder().workers(2).build().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    for _ in 0..(4 * scheduler.workers()) {
        let stop = Arc::clone(&stop);
        let spinner = Proc::new((), move |_, _, events, out| {
            let cancelled = events
                .as_slice()
                .iter()
                .any(|e| e.kind == EventKind::Cancel);
            out.status = if cancelled || stop.load(Ordering::Relaxed) {
                Status::Done(Payload::empty())
            } else {
                Status::Continue
            };
        });
        scheduler.spawn(spinner, "spin", Payload::empty()).unwrap();
    }
    let newcomer = Proc::new((), |_, _, _, out| out.status = Status::Done(pc(&1u8)));
    let handle = scheduler
        .spawn_handle(newcomer, "new", Payload::empty())
        .unwrap();
    let result = handle.wait_timeout(PATIENCE);
    stop.store(true, Ordering::Relaxed);
    assert_eq!(de::<u8>(&result.expect("the newcomer ran").unwrap()), 1);
    assert!(scheduler.counters().steps > 0);
}

#[test]
fn terminate_ends_a_process_without_stepping_it_again() {
    let (scheduler, gates) = with_gate(1);
    let steps = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&steps);
    let process = Proc::new((), move |_, env, _, out| {
        counted.fetch_add(1, Ordering::Relaxed);
        if env.first {
            out.push(Tag(1), call("gate"));
        }
    });
    let handle = scheduler
        .spawn_handle(process, "t", Payload::empty())
        .unwrap();
    let gate = gates.recv_timeout(PATIENCE).unwrap();
    scheduler
        .terminate(handle.pid(), "terminated: grace period over")
        .unwrap();
    let err = handle.wait_timeout(PATIENCE).unwrap().unwrap_err();
    assert_eq!(err.message(), "terminated: grace period over");
    gate.complete(Ok(Payload::empty()));
    assert_eq!(steps.load(Ordering::Relaxed), 1);
}

#[test]
fn builder_refuses_zero_workers_or_budget() {
    let err = Scheduler::builder().workers(0).build().unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid scheduler setting: workers must be at least 1"
    );
    let err = Scheduler::builder().budget(0).build().unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid scheduler setting: the budget must be at least 1 event"
    );
}

#[test]
fn a_cancelled_process_that_ignores_it_is_terminated_after_the_grace_period() {
    let scheduler = Scheduler::builder()
        .workers(1)
        .cancel_grace(Some(Duration::from_millis(50)))
        .build()
        .unwrap();
    let steps = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&steps);
    let (started_tx, started_rx) = unbounded();
    // Ignores everything, cancels included.
    let stubborn = Proc::new((), move |_, env, _, out| {
        counted.fetch_add(1, Ordering::Relaxed);
        if env.first {
            started_tx.send(()).unwrap();
        }
        out.status = Status::Idle;
    });
    let handle = scheduler
        .spawn_handle(stubborn, "stubborn", Payload::empty())
        .unwrap();
    started_rx.recv_timeout(PATIENCE).unwrap();
    scheduler.cancel(handle.pid()).unwrap();
    scheduler.cancel(handle.pid()).unwrap();
    let err = handle.wait_timeout(PATIENCE).unwrap().unwrap_err();
    assert_eq!(
        err.message(),
        "terminated: it did not finish within 50ms of being cancelled"
    );
    // Its first step, then one or two steps for the cancels (the second may arrive while the
    // first is being stepped), and none after the grace period.
    assert!((2..=3).contains(&steps.load(Ordering::Relaxed)));
}

#[derive(Default)]
struct Tally {
    spawned: AtomicU64,
    events: AtomicU64,
    yields: AtomicU64,
    finished: AtomicU64,
}

impl wfhost_scheduler::Observer for Tally {
    fn spawned(&self, _: Pid, _: Option<Pid>, entry: &str) {
        assert_eq!(entry, "observed");
        self.spawned.fetch_add(1, Ordering::Relaxed);
    }
    fn event(&self, _: Pid, _: &wfcontract::Event) {
        self.events.fetch_add(1, Ordering::Relaxed);
    }
    fn yielded(&self, _: Pid, _: &wfcontract::Yield) {
        self.yields.fetch_add(1, Ordering::Relaxed);
    }
    fn finished(&self, _: Pid, _: &ProcessResult) {
        self.finished.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn an_observer_sees_every_spawn_event_yield_and_exit() {
    let tally = Arc::new(Tally::default());
    let scheduler = Scheduler::builder()
        .workers(2)
        .observer(Arc::clone(&tally) as Arc<dyn wfhost_scheduler::Observer>)
        .build()
        .unwrap();
    let (tx, rx) = unbounded();
    for _ in 0..10 {
        // Sleeps twice, then finishes: 2 yields, 2 completion events.
        let process = Proc::new(0u8, |n, _, _, out| {
            *n += 1;
            if *n <= 2 {
                out.push(Tag(u64::from(*n)), Command::Sleep(Duration::from_millis(1)));
            } else {
                out.status = Status::Done(Payload::empty());
            }
        });
        let spawn = Spawn::new(process, "observed", Payload::empty()).notify(tx.clone());
        scheduler.spawn_with(spawn).unwrap();
    }
    collect(&rx, 10);
    scheduler.shutdown(Duration::from_secs(1));
    assert_eq!(tally.spawned.load(Ordering::Relaxed), 10);
    assert_eq!(tally.yields.load(Ordering::Relaxed), 20);
    assert_eq!(tally.events.load(Ordering::Relaxed), 20);
    assert_eq!(tally.finished.load(Ordering::Relaxed), 10);
}

#[test]
fn process_and_mailbox_limits_refuse_with_a_reason() {
    let scheduler = Scheduler::builder()
        .workers(1)
        .max_processes(Some(2))
        .mailbox_limit(Some(3))
        .build()
        .unwrap();
    let idle = || Proc::new((), |_, _, _, out| out.status = Status::Idle);
    // Held, so the first two stay live and their mailboxes fill without being read.
    let held = HeldWorker::hold(&scheduler);
    let first = scheduler.spawn(idle(), "a", Payload::empty()).unwrap();
    assert_eq!(
        scheduler.spawn(idle(), "b", Payload::empty()),
        Err(Error::TooManyProcesses(2))
    );
    for _ in 0..3 {
        scheduler.send(first, Payload::empty()).unwrap();
    }
    assert_eq!(
        scheduler.send(first, Payload::empty()),
        Err(Error::MailboxFull(first))
    );
    // Cancels are never refused.
    scheduler.cancel(first).unwrap();
    held.release();
    // The idle process ignores its cancel; no need to wait for it.
    scheduler.shutdown(Duration::from_millis(10));
}

#[test]
fn a_long_computation_in_continue_steps_finishes_across_turns() {
    // 100 steps with no events: more than three budgets, so it is requeued three times.
    let scheduler = Scheduler::builder().workers(1).build().unwrap();
    let worker = Proc::new(0u32, |steps, _, _, out| {
        *steps += 1;
        out.status = if *steps == 100 {
            Status::Done(pc(steps))
        } else {
            Status::Continue
        };
    });
    let handle = scheduler
        .spawn_handle(worker, "compute", Payload::empty())
        .unwrap();
    let steps: u32 = de(&handle.wait_timeout(PATIENCE).expect("finished").unwrap());
    assert_eq!(steps, 100);
    assert_eq!(scheduler.counters().steps, 100);
}

#[test]
fn a_forgotten_sleep_never_completes() {
    let scheduler = Scheduler::builder().workers(1).build().unwrap();
    // Sleeps 20 ms (tag 1) and 40 ms (tag 2), forgets tag 1 at once, and reports what completed.
    let process = Proc::new(Vec::<u64>::new(), |seen, env, events, out| {
        out.status = Status::Wait;
        if env.first {
            out.push(Tag(1), Command::Sleep(Duration::from_millis(20)));
            out.push(Tag(2), Command::Sleep(Duration::from_millis(40)));
            out.push(Tag(0), Command::Forget(Tag(1)));
            return;
        }
        seen.extend(events.map(|e| e.tag.0));
        if seen.contains(&2) {
            out.status = Status::Done(pc(seen));
        }
    });
    let handle = scheduler
        .spawn_handle(process, "forget", Payload::empty())
        .unwrap();
    let seen: Vec<u64> = de(&handle.wait_timeout(PATIENCE).unwrap().unwrap());
    assert_eq!(seen, [2]);
}

#[test]
fn pending_sleeps_are_limited_per_process_and_a_reused_tag_replaces_its_sleep() {
    let scheduler = Scheduler::builder()
        .workers(1)
        .max_sleeps(3)
        .build()
        .unwrap();
    // Five long sleeps (tags 1-5), then tag 1 again, short: tags 4 and 5 are refused at once,
    // and the second tag 1 replaces the first, so the short one is what completes.
    let process = Proc::new(
        Vec::<(u64, Option<ErrorKind>)>::new(),
        |seen, env, events, out| {
            out.status = Status::Wait;
            if env.first {
                for tag in 1..=5 {
                    out.push(Tag(tag), Command::Sleep(Duration::from_secs(3600)));
                }
                out.push(Tag(1), Command::Sleep(Duration::from_millis(1)));
                return;
            }
            seen.extend(events.map(|e| (e.tag.0, e.error.map(|e| e.kind))));
            if seen.len() == 3 {
                out.status = Status::Done(pc(seen));
            }
        },
    );
    let handle = scheduler
        .spawn_handle(process, "naps", Payload::empty())
        .unwrap();
    let mut seen: Vec<(u64, Option<ErrorKind>)> =
        de(&handle.wait_timeout(PATIENCE).unwrap().unwrap());
    seen.sort_by_key(|(tag, _)| *tag);
    assert_eq!(
        seen,
        [
            (1, None),
            (4, Some(ErrorKind::LimitReached)),
            (5, Some(ErrorKind::LimitReached))
        ]
    );
}

#[test]
fn joins_waiting_on_one_process_are_limited() {
    let (scheduler, gate) = {
        let (builder, rx) = forward_calls(Scheduler::builder().workers(2).max_watchers(2));
        (builder.build().unwrap(), rx)
    };
    // The target waits on a call the test never completes until the end.
    let target = Proc::new((), |_, env, _, out| {
        out.status = Status::Wait;
        if env.first {
            out.push(Tag(1), call("hold"));
        } else {
            out.status = Status::Done(pc(&7u32));
        }
    });
    let target = scheduler.spawn(target, "target", Payload::empty()).unwrap();
    let held = gate.recv_timeout(PATIENCE).unwrap();
    let (tx, rx) = unbounded();
    for _ in 0..3 {
        let tx = tx.clone();
        let joiner = Proc::new((), move |_, env, mut events, out| {
            out.status = Status::Wait;
            if env.first {
                out.push(Tag(1), Command::Join(target));
                return;
            }
            let event = events.next().unwrap();
            tx.send(event.error.map(|e| e.kind)).unwrap();
            out.status = Status::Done(Payload::empty());
        });
        scheduler.spawn(joiner, "join", Payload::empty()).unwrap();
    }
    // The third join is refused at once; the other two wait for the target.
    assert_eq!(
        rx.recv_timeout(PATIENCE).unwrap(),
        Some(ErrorKind::LimitReached)
    );
    held.complete(Ok(Payload::empty()));
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), None);
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), None);
}

#[test]
fn a_confined_process_cancels_and_joins_only_its_own_children() {
    let scheduler = Scheduler::builder().workers(2).build().unwrap();
    let stranger = Proc::new((), |_, _, _, out| out.status = Status::Idle);
    let stranger = scheduler
        .spawn(stranger, "stranger", Payload::empty())
        .unwrap();
    let (tx, rx) = unbounded();
    let confined = Proc::new((), move |_, env, events, out| {
        out.status = Status::Wait;
        if env.first {
            out.push(Tag(1), Command::Cancel(stranger));
            out.push(Tag(2), Command::Join(stranger));
            out.push(Tag(3), Command::Cancel(Pid(999_999)));
            return;
        }
        for event in events {
            tx.send((event.tag.0, event.error.map(|e| e.kind))).unwrap();
        }
    });
    scheduler
        .spawn_with(Spawn::new(confined, "confined", Payload::empty()).confined(true))
        .unwrap();
    let mut seen: Vec<_> = (0..3).map(|_| rx.recv_timeout(PATIENCE).unwrap()).collect();
    seen.sort_by_key(|(tag, _)| *tag);
    assert_eq!(
        seen,
        [
            (1, Some(ErrorKind::NotAllowed)),
            (2, Some(ErrorKind::NotAllowed)),
            (3, Some(ErrorKind::NoSuchProcess))
        ]
    );
    // The stranger was not touched: it still takes messages.
    scheduler.send(stranger, Payload::empty()).unwrap();
    assert_eq!(scheduler.live(), 2);
    let report = scheduler.shutdown(Duration::ZERO);
    assert_eq!(report.closed, 2);
}

/// A yield completed inline (`now`) wakes the step after it, whatever the process asks to
/// receive: a step that asks for no messages, or for all, as the one before did, must still see
/// the completion its own yield got.
#[test]
fn inline_completions_wake_the_next_step_whatever_the_process_receives() {
    const STEPS: u64 = 1_000;
    let scheduler = Scheduler::builder().workers(1).build().unwrap();
    for receive in [0, 1, u32::MAX] {
        let process = Proc::new(0u64, move |completed, _, events, out| {
            out.receive = receive;
            *completed += events
                .into_iter()
                .filter(|event| event.kind == EventKind::YieldComplete)
                .count() as u64;
            if *completed == STEPS {
                out.status = Status::Done(pc(completed));
                return;
            }
            out.push(Tag(*completed + 1), Command::Now);
            out.status = Status::Wait;
        });
        let handle = scheduler
            .spawn_handle(process, "clock-reader", Payload::empty())
            .unwrap();
        let completed: u64 = de(&handle.wait_timeout(PATIENCE).unwrap().unwrap());
        assert_eq!(completed, STEPS, "receive {receive}");
    }
}

/// A process that yields faster than it takes what its yields return (1,000 `now`s a step, always
/// asking to run again) would pile their completions up in the host: it fails with `Limit` once
/// more than the limit wait, and the host keeps no more than that.
#[test]
fn a_process_that_yields_faster_than_it_takes_fails_at_the_limit() {
    let scheduler = Scheduler::builder()
        .workers(1)
        .max_waiting_completions(5_000)
        .build()
        .unwrap();
    let taken = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&taken);
    let process = Proc::new(0u64, move |tag, _, events, out| {
        counted.fetch_add(events.into_iter().count() as u64, Ordering::Relaxed);
        for _ in 0..1_000 {
            *tag += 1;
            out.push(Tag(*tag), Command::Now);
        }
        out.status = Status::Continue;
    });
    let handle = scheduler
        .spawn_handle(process, "yielder", Payload::empty())
        .unwrap();
    let error = handle.wait_timeout(PATIENCE).unwrap().unwrap_err();
    assert_eq!(
        error.kind(),
        wfhost_scheduler::FailureKind::Limit,
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("it left more than 5000 completions of its yields untaken"),
        "{error}"
    );
    // Each step adds 1,000 and a turn takes one budget (32) of them. The first turn steps twice
    // (its first step has no events, so 31 are left for the second): 1,969 wait after it, then
    // 2,937, 3,905, 4,873 and 5,841 after turns two to five; the sixth finds more than 5,000 and
    // fails the process without stepping it. Taken: 31 + 4 x 32.
    assert_eq!(
        taken.load(Ordering::Relaxed),
        DEFAULT_BUDGET as u64 - 1 + 4 * DEFAULT_BUDGET as u64
    );
}

/// A parent may pile up joins of its child only to the same limit as everyone else (each gets a
/// copy of the result); others cannot crowd the parent's out.
#[test]
fn a_parents_joins_of_one_child_are_bounded_too() {
    let (builder, gates) = forward_calls(Scheduler::builder().workers(1).max_watchers(10));
    let scheduler = builder.build().unwrap();
    let child = Proc::new((), |_, env, _, out| {
        if env.first {
            out.push(Tag(1), call("gate"));
        } else {
            out.status = Status::Done(pc(&7u32));
        }
    });
    // The parent joins the child named in its first message 25 times, then says so through a
    // gate, and counts the answers.
    const JOINED: Tag = Tag(100);
    let parent = Proc::new((0u32, 0u32), |(joined, refused), _, events, out| {
        out.status = Status::Wait;
        for event in events {
            match event.kind {
                EventKind::Message => {
                    let child: Pid = de(&event.data);
                    for tag in 0..25 {
                        out.push(Tag(tag), Command::Join(child));
                    }
                    out.push(JOINED, call("gate"));
                }
                EventKind::YieldComplete if event.tag == JOINED => {}
                EventKind::YieldComplete => match event.into_result() {
                    Ok(data) => {
                        assert_eq!(de::<u32>(&data), 7);
                        *joined += 1;
                    }
                    Err(error) => {
                        assert_eq!(error.kind, ErrorKind::LimitReached, "{error}");
                        assert!(error.message.contains("joins by its parent"), "{error}");
                        *refused += 1;
                    }
                },
                EventKind::Cancel => {}
            }
        }
        if *joined + *refused == 25 {
            out.status = Status::Done(pc(&(*joined, *refused)));
        }
    });
    let parent = scheduler
        .spawn_handle(parent, "parent", Payload::empty())
        .unwrap();
    let child = scheduler
        .spawn_with(Spawn::new(child, "child", Payload::empty()).parent(parent.pid()))
        .unwrap();
    // Ten strangers' joins fill the others' share; the parent's are counted apart.
    for stranger in 0..10u64 {
        scheduler.join(child, Pid(1_000_000 + stranger), Tag(0));
    }
    let gate = gates.recv_timeout(PATIENCE).unwrap();
    scheduler.send(parent.pid(), pc(&child)).unwrap();
    // The refusals come at once; the ten joins that wait are answered when the child ends.
    let joins_made = gates.recv_timeout(PATIENCE).unwrap();
    gate.complete(Ok(Payload::empty()));
    joins_made.complete(Ok(Payload::empty()));
    let (joined, refused): (u32, u32) = de(&parent.wait_timeout(PATIENCE).unwrap().unwrap());
    assert_eq!((joined, refused), (10, 15));
}

#[test]
fn the_call_handler_hears_of_a_watched_processs_forgotten_calls_and_its_end() {
    /// Records what it hears; watches the processes that call.
    #[derive(Default)]
    struct Watching {
        heard: Mutex<Vec<String>>,
    }
    impl wfhost_scheduler::Handler for Watching {
        fn handle(&self, request: wfhost_scheduler::Request, cx: &wfhost_scheduler::Context<'_>) {
            if request.command.call().is_some_and(|c| c.name == "watched") {
                cx.watch_end();
            }
        }
        fn ended(&self, pid: Pid) {
            self.heard.lock().push(format!("ended {}", pid.0));
        }
        fn forgot(&self, pid: Pid, tag: Tag) {
            self.heard
                .lock()
                .push(format!("forgot {} {}", pid.0, tag.0));
        }
    }
    let watching = Arc::new(Watching::default());
    let scheduler = Scheduler::builder()
        .workers(1)
        .handler_arc(CommandKind::Call, watching.clone())
        .handler_arc(CommandKind::Retry, watching.clone())
        .build()
        .unwrap();
    // Calls (tag 1), forgets it, sleeps a moment, ends; one that never watches does the same.
    let caller = |name: &'static str| {
        Proc::new((), move |_, env, _, out| {
            if env.first {
                out.push(Tag(1), call(name));
                out.push(Tag(0), Command::Forget(Tag(1)));
                out.push(Tag(2), Command::Sleep(Duration::from_millis(1)));
                out.status = Status::Wait;
            } else {
                out.status = Status::Done(Payload::empty());
            }
        })
    };
    let watched = scheduler
        .spawn_handle(caller("watched"), "watched", Payload::empty())
        .unwrap();
    let pid = watched.pid();
    watched.wait_timeout(PATIENCE).unwrap().unwrap();
    let quiet = scheduler
        .spawn_handle(caller("quiet"), "quiet", Payload::empty())
        .unwrap();
    quiet.wait_timeout(PATIENCE).unwrap().unwrap();
    // Told once each, though the handler serves two kinds; nothing of the one that never asked.
    assert_eq!(
        *watching.heard.lock(),
        [format!("forgot {} 1", pid.0), format!("ended {}", pid.0)]
    );
}
