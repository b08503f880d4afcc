//! Loom models of the two protocols a lost wake-up would hide in: a process's state versus the
//! events racing its step (`state.rs` + `inbox.rs`), and idle workers versus producers
//! (`park.rs`). Run with `RUSTFLAGS="--cfg loom" cargo test -p wfhost-scheduler --lib --release loom`.

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use wfcontract::{Event, Payload, Pid};

use crate::inbox::Inbox;
use crate::park::{Idle, Unpark};
use crate::state::{Notify, Park, State, Wake, BLOCKED, WAITING};
use crate::sync::Mutex;
use crate::worker::{park_unless_woken, Leftover};

struct Process {
    state: State,
    inbox: Mutex<Inbox>,
}

fn message() -> Event {
    Event::message(Pid(1), Payload::empty())
}

impl Process {
    /// A process that has just been taken by a worker and takes messages.
    fn running() -> Process {
        let mut inbox = Inbox::default();
        let _ = inbox.accept(u32::MAX);
        let process = Process {
            state: State::new(),
            inbox: Mutex::new(inbox),
        };
        assert!(process.state.start_running());
        process
    }

    /// A process in a run queue (`Ready`), about to be taken by a worker.
    fn queued() -> Process {
        let mut inbox = Inbox::default();
        let _ = inbox.accept(u32::MAX);
        Process {
            state: State::new(),
            inbox: Mutex::new(inbox),
        }
    }

    /// A producer: push an event, then notify. Returns true if it must queue the process.
    fn deliver(&self) -> bool {
        let wake = self.inbox.lock().push(message()).unwrap();
        self.state
            .notify(wake.expect("a message it asked for wakes it"))
            == Notify::Schedule
    }
}

/// The tail of a worker's turn, as the worker runs it: the inbox looked at after the step, then
/// `park_unless_woken`. Returns true if the worker would step again (it saw an event), false if it
/// parked the process.
fn end_of_turn(process: &Process) -> bool {
    let left = Leftover::of(&process.inbox.lock());
    !park_unless_woken(&process.state, &process.inbox, BLOCKED, left)
}

#[test]
fn loom_an_event_racing_the_end_of_a_step_is_never_stranded() {
    loom::model(|| {
        let process = Arc::new(Process::running());
        let producer = {
            let process = Arc::clone(&process);
            thread::spawn(move || process.deliver())
        };
        let stepped_again = end_of_turn(&process);
        let scheduled = producer.join().unwrap();
        // Exactly one side takes responsibility for the event: the worker steps again, or the
        // producer queues the process. Neither means a lost wake-up; both, a double run.
        assert_ne!(stepped_again, scheduled);
    });
}

/// `start_running` is a plain store (no producer writes a `Ready` state): an event pushed while
/// a worker takes a queued process is drained by the turn, or seen at its end, or (pushed after
/// the turn parked the process) queues it; it is never stranded, and a process the worker keeps
/// is never queued as well.
#[test]
fn loom_an_event_racing_the_start_of_a_turn_is_never_stranded() {
    loom::model(|| {
        let process = Arc::new(Process::queued());
        let producer = {
            let process = Arc::clone(&process);
            thread::spawn(move || process.deliver())
        };
        // The turn as the worker runs it: start, drain (what is left is looked at under the
        // same lock), step, and park on what the drain left unless flagged since.
        assert!(process.state.start_running());
        let (drained, left) = {
            let mut inbox = process.inbox.lock();
            let drained =
                inbox.drain_into(&mut Vec::new(), &mut Default::default(), 32, usize::MAX);
            (drained, Leftover::of(&inbox))
        };
        let stepped_again = !park_unless_woken(&process.state, &process.inbox, BLOCKED, left);
        let scheduled = producer.join().unwrap();
        assert!(drained == 1 || stepped_again || scheduled);
        assert!(!(stepped_again && scheduled));
    });
}

#[test]
fn loom_two_producers_schedule_a_parked_process_exactly_once() {
    loom::model(|| {
        let process = Arc::new(Process::running());
        let schedules = Arc::new(AtomicUsize::new(0));
        let producers: Vec<_> = (0..2)
            .map(|_| {
                let process = Arc::clone(&process);
                let schedules = Arc::clone(&schedules);
                thread::spawn(move || {
                    if process.deliver() {
                        schedules.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        let stepped_again = end_of_turn(&process);
        for producer in producers {
            producer.join().unwrap();
        }
        let schedules = schedules.load(Ordering::Relaxed);
        if stepped_again {
            // The worker still owns it; it may have seen one event and a producer queued it
            // after a later park. Never more than one queue entry.
            assert!(schedules <= 1);
        } else {
            assert_eq!(schedules, 1);
        }
    });
}

/// A process that could not step parks as `Waiting` while whatever it waits for is freed on
/// another thread, which wakes it: exactly one side takes responsibility, so the wake-up is never
/// lost (the worker sees the flag and tries again) and the process is never queued twice.
#[test]
fn loom_a_resource_freed_while_the_process_goes_to_wait_is_never_lost() {
    loom::model(|| {
        let process = Arc::new(Process::running());
        let waker = {
            let process = Arc::clone(&process);
            thread::spawn(move || process.state.notify(Wake::All) == Notify::Schedule)
        };
        let parked = process.state.park(WAITING) == Park::Parked;
        let scheduled = waker.join().unwrap();
        // Parked: the waker queued it. Not parked: the worker requeues it itself.
        assert_eq!(parked, scheduled);
    });
}

/// A run queue of interchangeable tasks, as a count. Only read-modify-writes touch it: loom can
/// let a plain store slip inside a concurrent read-modify-write (tokio-rs/loom#254), which would
/// report lost wake-ups that cannot happen.
fn push(queued: &AtomicUsize) {
    queued.fetch_add(1, Ordering::Relaxed);
}

fn pop(queued: &AtomicUsize) -> bool {
    queued
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
}

#[test]
fn loom_a_worker_going_to_sleep_never_misses_a_push() {
    loom::model(|| {
        let idle = Arc::new(Idle::new());
        let queued = Arc::new(AtomicUsize::new(0));
        idle.begin_search();
        let producer = {
            let idle = Arc::clone(&idle);
            let queued = Arc::clone(&queued);
            thread::spawn(move || {
                push(&queued);
                idle.notify_one();
            })
        };
        // The worker searches, finds nothing, parks; it must come back for the task. A lost
        // wake-up leaves it asleep with no thread to wake it, which loom reports as a deadlock.
        loop {
            if pop(&queued) {
                if idle.end_search() {
                    idle.notify_one();
                }
                break;
            }
            match idle.park(|| queued.load(Ordering::Relaxed) > 0) {
                Unpark::Search => continue,
                Unpark::Shutdown => unreachable!("nobody shuts down"),
            }
        }
        producer.join().unwrap();
    });
}

#[test]
fn loom_two_workers_and_two_pushes_all_get_run() {
    loom::model(|| {
        let idle = Arc::new(Idle::new());
        let queued = Arc::new(AtomicUsize::new(0));
        let run = Arc::new(AtomicUsize::new(0));
        let worker = |idle: Arc<Idle>, queued: Arc<AtomicUsize>, run: Arc<AtomicUsize>| {
            move || {
                idle.begin_search();
                loop {
                    if pop(&queued) {
                        if idle.end_search() {
                            idle.notify_one();
                        }
                        if run.fetch_add(1, Ordering::Relaxed) + 1 == 2 {
                            idle.shutdown();
                            return;
                        }
                        idle.begin_search();
                        continue;
                    }
                    match idle.park(|| queued.load(Ordering::Relaxed) > 0) {
                        Unpark::Search => continue,
                        Unpark::Shutdown => return,
                    }
                }
            }
        };
        let a = thread::spawn(worker(
            Arc::clone(&idle),
            Arc::clone(&queued),
            Arc::clone(&run),
        ));
        let b = thread::spawn(worker(
            Arc::clone(&idle),
            Arc::clone(&queued),
            Arc::clone(&run),
        ));
        push(&queued);
        idle.notify_one();
        push(&queued);
        idle.notify_one();
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(run.load(Ordering::Relaxed), 2);
    });
}
