//! The worker loop: find a ready process, give it one turn, repeat; spin and park when idle.

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use wfcontract::{Event, Status, StepOutput, Yield};

use crate::clock::{self, Reading};
use crate::counters::Counter;
use crate::current;
use crate::handle::SchedulerHandle;
use crate::handlers::{unknown_command, Context, Handlers, Request};
use crate::hold::{Hold, NoNotes, NoteSource, Notes};
use crate::inbox::Inbox;
use crate::park::{Unpark, SPIN_ROUNDS, SPIN_TIGHT};
use crate::process::{Events, FailureKind, InitContext, Process, ProcessError};
use crate::queue::{Found, Local, Task};
use crate::shared::{panic_message, Shared};
use crate::slot::{Body, Held, Slot};
use crate::state::{Park, State, BLOCKED, IDLE, WAITING};
use crate::sync::Mutex;
use crate::targets::Targets;
use crate::wake::{Readiness, Turn, WakerSource, Wakes};

/// Every this many turns a worker takes from the global queue before its own, so that new
/// submissions are seen even when the local queue never empties (Go and tokio use 61 too: a prime,
/// so the check does not fall into step with periodic workloads).
const GLOBAL_POLL_INTERVAL: u32 = 61;

/// A process whose turns have run this long in all since it last went behind the others (its
/// charge, `Slot::charge`) ends its turn at the next step boundary, even with budget left, and
/// goes to the queue of processes that overran (served after every other queue): at once if it
/// asked to run again, when it is woken if it waits. The worker then owes the others as much time
/// as that charge: it serves the overrun queue first again only once it has spent that long on
/// other processes, or has nothing else to run. So a process whose every step takes long (each
/// just under the step time limit), or that runs a little under the slice and then waits for a
/// moment (a zero sleep, a message from a partner), cannot hold a worker: everything else runnable
/// gets at least as much of the worker's time. Go preempts at 10 ms too.
const TURN_SLICE: Duration = Duration::from_millis(10);

/// The failure of a process that left more than `most` completions untaken.
fn too_many_completions(most: usize) -> (FailureKind, String) {
    (
        FailureKind::Limit,
        format!(
            "it left more than {most} completions of its yields untaken (it yields faster than \
             it takes what they return; the scheduler's max_waiting_completions)"
        ),
    )
}

/// What a step said, and whether its yields were completed inline.
struct Stepped {
    status: Status,
    receive: u32,
    completed_inline: bool,
}

/// What was left in the inbox after a drain, or after a step said what it takes next.
#[derive(Clone, Copy)]
pub(crate) struct Leftover {
    /// Anything at all (which wakes a `Blocked` process).
    any: bool,
    /// Something that wakes an `Idle` process.
    idle: bool,
}

impl Leftover {
    pub(crate) fn of(inbox: &Inbox) -> Leftover {
        Leftover {
            any: !inbox.is_empty(),
            idle: inbox.wakes_idle(),
        }
    }

    fn wakes(self, target: u8) -> bool {
        if target == IDLE {
            self.idle
        } else {
            self.any
        }
    }
}

/// The process of a turn, as its waker source and its hold reach it.
struct TurnOf<'a> {
    shared: &'a Arc<Shared>,
    slot: &'a Arc<Slot>,
}

impl Turn for TurnOf<'_> {
    fn pid(&self) -> wfcontract::Pid {
        self.slot.pid
    }

    fn scheduler(&self) -> std::sync::Weak<dyn Wakes> {
        Arc::downgrade(self.shared) as std::sync::Weak<dyn Wakes>
    }

    fn terminating(&self) -> bool {
        self.slot.inbox.lock().terminating()
    }
}

pub(crate) struct Worker {
    handle: SchedulerHandle,
    /// The scheduler's command handlers.
    handlers: Arc<Handlers>,
    index: usize,
    tick: u32,
    /// The last turn ran out of time: look at the shared queues before the local one.
    look_outside: bool,
    /// Time this worker owes processes other than those that overran their time slice: what
    /// overrunning turns took, less what turns of others have taken since.
    owed: Duration,
    /// Set by a turn that ended because its process's charge reached the slice.
    overran: bool,
    /// The charge the process of the current turn came with (see [`TURN_SLICE`]).
    charge: Duration,
    /// The last reading of the clock (`clock.rs`), taken when a turn ends (and when a step within
    /// a turn ends, if the turn goes on): the end of one turn is the start of the next when the
    /// worker goes straight on, so a turn of one step costs one reading.
    clock: Reading,
    /// `clock` was read at the end of the turn's last step (by the check of its time slice, with
    /// nothing done since): the turn's end needs no second reading.
    clock_fresh: bool,
    /// The events of the current step; reused.
    events: Vec<Event>,
    /// The processes this worker's processes sent to lately (`targets.rs`).
    targets: RefCell<Targets>,
    /// The output of the current step; reused.
    out: StepOutput,
}

/// The thread body of worker `index`.
pub(crate) fn run(shared: Arc<Shared>, handlers: Arc<Handlers>, index: usize, local: Local) {
    current::enter(shared.id(), index, local);
    let mut worker = Worker {
        handle: SchedulerHandle { shared },
        handlers,
        index,
        tick: 0,
        look_outside: false,
        owed: Duration::ZERO,
        overran: false,
        charge: Duration::ZERO,
        clock: clock::now(),
        clock_fresh: false,
        events: Vec::new(),
        targets: RefCell::default(),
        out: StepOutput::new(),
    };
    worker.run();
    if let Some(mut local) = current::leave() {
        local.clear();
    }
}

impl Worker {
    fn shared(&self) -> &Shared {
        &self.handle.shared
    }

    fn run(&mut self) {
        while !self.shared().shutdown.load(Ordering::Acquire) {
            self.tick = self.tick.wrapping_add(1);
            let shared = &self.handle.shared;
            shared.timer.fire_due(&**shared);
            let task = match self.next_local() {
                Some(task) => task,
                None => match self.search() {
                    Some(task) => {
                        // The search may have waited: the last reading is stale.
                        self.clock = clock::now();
                        task
                    }
                    None => return,
                },
            };
            let started = self.clock;
            let overran = self.turn(task, started);
            if !std::mem::take(&mut self.clock_fresh) {
                self.clock = clock::now();
            }
            let took = self.clock.since(started);
            self.owed = if overran {
                self.owed + self.charge + took
            } else {
                self.owed.saturating_sub(took)
            };
        }
    }

    /// From this worker's own queue, with the periodic look at the global queue first; a process
    /// that overran its time slice first once the others have had their time.
    fn next_local(&mut self) -> Option<Task> {
        if self.owed.is_zero() {
            if let Some(task) = self.shared().queues.pop_overrun() {
                return Some(task);
            }
        }
        let global_first = std::mem::take(&mut self.look_outside)
            || self.tick.is_multiple_of(GLOBAL_POLL_INTERVAL);
        // Borrowed, not cloned: a clone is a locked increment and decrement, at every turn, of
        // one reference count every worker writes.
        let shared = &*self.handle.shared;
        let (task, from_global) = current::with_local(|local| {
            if global_first {
                if let Some(task) = shared.queues.pop_shared(&local.deque, true) {
                    return (Some(task), true);
                }
            }
            if let Some(task) = local.pop() {
                return (Some(task), false);
            }
            let task = shared.queues.pop_shared(&local.deque, false);
            let found = task.is_some();
            (task, found)
        });
        if from_global {
            self.bump(Counter::GlobalPop);
        }
        task
    }

    /// Spins over the global queue and the other workers' queues, then parks. `None` at shutdown.
    fn search(&mut self) -> Option<Task> {
        let shared = Arc::clone(&self.handle.shared);
        shared.idle.begin_search();
        loop {
            for round in 0..SPIN_ROUNDS {
                if shared.shutdown.load(Ordering::Acquire) {
                    shared.idle.end_search();
                    return None;
                }
                let found = current::with_local(|local| shared.queues.search(self.index, local));
                let task = match found {
                    Found::Global(task) => {
                        self.bump(Counter::GlobalPop);
                        task
                    }
                    Found::Stolen(task) => {
                        self.bump(Counter::Steal);
                        task
                    }
                    Found::Nothing => {
                        if round < SPIN_TIGHT {
                            for _ in 0..(1 << round) {
                                std::hint::spin_loop();
                            }
                        } else {
                            std::thread::yield_now();
                        }
                        continue;
                    }
                };
                if shared.idle.end_search() {
                    shared.idle.notify_one();
                }
                return Some(task);
            }
            self.bump(Counter::Park);
            let local_empty = current::with_local(|local| local.is_empty());
            debug_assert!(local_empty, "a worker with local work does not park");
            match shared.idle.park(|| shared.queues.has_work()) {
                Unpark::Search => continue,
                Unpark::Shutdown => return None,
            }
        }
    }

    fn bump(&self, counter: Counter) {
        self.shared().counters.bump(Some(self.index), counter);
    }

    /// One turn of one process. Returns true if the process's charge reached the time slice (the
    /// process then went to the overrun queue).
    fn turn(&mut self, slot: Task, started: Reading) -> bool {
        self.overran = false;
        if slot.behind.load(Ordering::Relaxed) {
            // Set by a park that failed (an event came): it runs on in this turn instead.
            slot.behind.store(false, Ordering::Relaxed);
        }
        self.charge = Duration::from_nanos(slot.charge.load(Ordering::Relaxed));
        self.turn_steps(slot, started);
        self.overran
    }

    /// Whether the process's charge with the turn that began at `started` has reached the time
    /// slice; read where the turn would otherwise go on, and before it parks.
    fn out_of_time(&mut self, started: Reading) -> bool {
        self.clock = clock::now();
        self.clock_fresh = true;
        self.charge + self.clock.since(started) >= TURN_SLICE
    }

    /// Records the process's charge with this turn, before the process is handed on (queued or
    /// parked, after which another worker may run it). Relaxed: the hand-off publishes it.
    fn charge(&self, slot: &Slot, started: Reading) {
        let charge = self.charge + self.clock.since(started);
        let nanos = u64::try_from(charge.as_nanos()).unwrap_or(u64::MAX);
        slot.charge.store(nanos, Ordering::Relaxed);
    }

    /// Init if new, then step while it has events, budget and time.
    fn turn_steps(&mut self, slot: Task, started: Reading) {
        if !slot.state.start_running() {
            debug_assert!(false, "queued process {} was not Ready", slot.pid);
            return;
        }
        let mut budget = self.shared().config.budget;
        // A step with no events is due after init and after `Continue`.
        let mut step_without_events = false;
        let mut target = BLOCKED;
        loop {
            // Whatever this step does comes after the last reading.
            self.clock_fresh = false;
            let (status, left) = 'step: {
                // SAFETY: this worker made the process `Running` above and holds it so until
                // the turn hands it on; the borrow ends before `after_step` borrows again.
                let mut body = unsafe { slot.body.borrow() };
                if body.held.is_some() {
                    match self.resume_held(&slot, &mut body) {
                        None => {
                            drop(body);
                            return self.wait_for_resource(slot);
                        }
                        Some(Err(error)) => {
                            return self.shared().finish(&slot, &mut body, Err(error));
                        }
                        // Acted on as a step that just ended.
                        Some(Ok(stepped)) => {
                            let left = Leftover::of(&slot.inbox.lock());
                            break 'step settle(&slot, &mut body, stepped, left);
                        }
                    }
                }
                if std::mem::take(&mut body.step_due) {
                    step_without_events = true;
                }
                if body.start.is_some() {
                    if let Err(error) = self.init(&slot, &mut body) {
                        return self.shared().finish(&slot, &mut body, Err(error));
                    }
                    step_without_events = true;
                }
                match self.prepare(&slot, &mut body) {
                    Ok(Readiness::Ready) => {}
                    Ok(Readiness::NotReady) => {
                        // Its events stay queued; the step it was due is remembered.
                        body.step_due = step_without_events;
                        drop(body);
                        return self.wait_for_resource(slot);
                    }
                    Err(error) => {
                        // Ended from outside meanwhile (a timeout, a termination): that is why it
                        // ends, not whatever getting it ready failed on.
                        let error = match slot.inbox.lock().take_terminate() {
                            Some((kind, reason)) => ProcessError::with_kind(kind, reason),
                            None => error,
                        };
                        return self.shared().finish(&slot, &mut body, Err(error));
                    }
                }
                let drained = {
                    let mut inbox = slot.inbox.lock();
                    let most = self.shared().config.max_waiting_completions;
                    match inbox.take_terminate() {
                        Some(ended) => Err(ended),
                        None if inbox.completions() + body.completed.get_mut().len() > most => {
                            Err(too_many_completions(most))
                        }
                        None => {
                            let max_bytes = self.shared().config.step_bytes;
                            let inline = body.completed.get_mut();
                            let count =
                                inbox.drain_into(&mut self.events, inline, budget, max_bytes);
                            let mut left = Leftover::of(&inbox);
                            left.any |= !inline.is_empty();
                            Ok((count, left))
                        }
                    }
                };
                let (count, left) = match drained {
                    Ok(drained) => drained,
                    Err((kind, reason)) => {
                        self.events.clear();
                        let error = ProcessError::with_kind(kind, reason);
                        return self.shared().finish(&slot, &mut body, Err(error));
                    }
                };
                if count == 0 && !step_without_events {
                    (None, left)
                } else {
                    budget = budget.saturating_sub(count.max(1));
                    match self.step(&slot, &mut body) {
                        Ok(Some(stepped)) => settle(&slot, &mut body, stepped, left),
                        Ok(None) => {
                            // Held until its journal has it: parked until released.
                            drop(body);
                            self.charge(&slot, started);
                            return self.wait_for_resource(slot);
                        }
                        Err(error) => {
                            return self.shared().finish(&slot, &mut body, Err(error));
                        }
                    }
                }
            };
            step_without_events = false;
            match self.after_step(&slot, started, &mut budget, status, &mut target) {
                AfterStep::Return => return,
                AfterStep::StepAgain => {
                    step_without_events = true;
                    continue;
                }
                AfterStep::Park(target) => {
                    if self.park_or_go_on(&slot, started, budget, target, left) {
                        return;
                    }
                }
            }
        }
    }

    /// Acts on a step's status: finishes the process, steps it again, or says how it parks.
    fn after_step(
        &mut self,
        slot: &Task,
        started: Reading,
        budget: &mut usize,
        status: Option<Status>,
        target: &mut u8,
    ) -> AfterStep {
        *target = match status {
            Some(Status::Done(result)) => {
                self.finish_with(slot, Ok(result));
                return AfterStep::Return;
            }
            Some(Status::Failed(message)) => {
                self.finish_with(slot, Err(ProcessError::new(message)));
                return AfterStep::Return;
            }
            Some(Status::Cancelled(message)) => {
                let error = ProcessError::with_kind(FailureKind::Cancelled, message);
                self.finish_with(slot, Err(error));
                return AfterStep::Return;
            }
            Some(Status::Continue) => {
                let out_of_time = self.out_of_time(started);
                if *budget == 0 || out_of_time {
                    // Remembered with the process, so the next turn steps it though no
                    // event will arrive.
                    // SAFETY: still `Running` on this worker (it is requeued just below), and
                    // the turn's borrow ended with the step.
                    unsafe { slot.body.borrow() }.step_due = true;
                    self.requeue(Arc::clone(slot), started, out_of_time);
                    return AfterStep::Return;
                }
                return AfterStep::StepAgain;
            }
            Some(Status::Idle) => IDLE,
            Some(Status::Wait) => BLOCKED,
            None => *target,
        };
        AfterStep::Park(*target)
    }

    /// Parks the process as `target` unless events that wake it wait; then it goes on in this
    /// turn (false) or, out of budget or time, is queued again (true).
    fn park_or_go_on(
        &mut self,
        slot: &Task,
        started: Reading,
        budget: usize,
        target: u8,
        left: Leftover,
    ) -> bool {
        // A process that has had its slice goes behind the others even if it now waits: it
        // parks, and whoever wakes it queues it in the overrun queue. Otherwise a process
        // running just under the slice and then waiting a moment would be back at once,
        // every time. (The flag is set before the park, which publishes it to the waker.)
        if self.out_of_time(started) {
            self.overran = true;
            slot.charge.store(0, Ordering::Relaxed);
            slot.behind.store(true, Ordering::Relaxed);
        } else {
            self.charge(slot, started);
        }
        if park_unless_woken(&slot.state, &slot.inbox, target, left) {
            return true;
        }
        let out_of_time = self.out_of_time(started);
        if budget == 0 || out_of_time {
            self.requeue(Arc::clone(slot), started, out_of_time);
            return true;
        }
        false
    }

    /// Asks the process whether it can step now (see [`Process::prepare`]).
    fn prepare(&self, slot: &Arc<Slot>, body: &mut Body) -> Result<Readiness, ProcessError> {
        let process = body.process.get_mut().expect("present until finished");
        let turn = TurnOf {
            shared: &self.handle.shared,
            slot,
        };
        let source = WakerSource { turn: &turn };
        catch_unwind(AssertUnwindSafe(|| process.prepare(&source))).unwrap_or_else(|panic| {
            Err(ProcessError::with_kind(
                FailureKind::Trap,
                format!("preparing a step panicked: {}", panic_message(&*panic)),
            ))
        })
    }

    /// The process cannot step until its waker is woken: park it as `Waiting`, which events do
    /// not end (only the waker or a termination does). A termination already asked for ends it
    /// now.
    fn wait_for_resource(&mut self, slot: Task) {
        let ended = slot.inbox.lock().take_terminate();
        if let Some((kind, reason)) = ended {
            return self.finish_with(&slot, Err(ProcessError::with_kind(kind, reason)));
        }
        match slot.state.park(WAITING) {
            Park::Parked => {}
            // Something arrived during the turn (perhaps the wake-up itself): try again at its
            // next turn, behind the others.
            Park::Notified => {
                let started = self.clock;
                self.requeue(slot, started, false)
            }
        }
    }

    fn init(&mut self, slot: &Slot, body: &mut Body) -> Result<(), ProcessError> {
        let start = body.start.take().expect("checked by the caller");
        let process = body.process.get_mut().expect("present until finished");
        let ctx = InitContext::new(slot.pid, slot.parent);
        let method = start.method;
        match catch_unwind(AssertUnwindSafe(|| {
            process.init(&ctx, &method, start.input)
        })) {
            Ok(result) => result,
            Err(panic) => Err(ProcessError::with_kind(
                FailureKind::Trap,
                format!(
                    "init of entry point '{method}' panicked: {}",
                    panic_message(&*panic)
                ),
            )),
        }
    }

    /// Steps the process with the drained events and dispatches its yields. Returns its status
    /// and how many messages it takes next.
    fn step(&mut self, slot: &Arc<Slot>, body: &mut Body) -> Result<Option<Stepped>, ProcessError> {
        let process = body.process.get_mut().expect("present until finished");
        self.out.reset();
        if self.handle.shared.observer.is_some() {
            let events = &self.events;
            self.handle.shared.observe(|observer| {
                for event in events {
                    observer.event(slot.pid, event);
                }
            });
        }
        let events = Events::new(&mut self.events);
        let out = &mut self.out;
        let result = catch_unwind(AssertUnwindSafe(|| process.step(events, out)));
        self.events.clear();
        self.bump(Counter::Step);
        match result {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(error),
            Err(panic) => {
                return Err(ProcessError::with_kind(
                    FailureKind::Trap,
                    format!("step panicked: {}", panic_message(&*panic)),
                ))
            }
        }
        if self.handle.shared.observer.is_some() {
            let yields = &self.out.yields;
            self.handle.shared.observe(|observer| {
                for y in yields {
                    observer.yielded(slot.pid, y);
                }
            });
        }
        let turn = TurnOf {
            shared: &self.handle.shared,
            slot,
        };
        let hold = Hold {
            turn: &turn,
            held: std::cell::Cell::new(false),
            first: std::cell::Cell::new(0),
            notes: std::cell::RefCell::new(Notes::new()),
        };
        let out = &self.out;
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| process.journal(out, &hold))) {
            return Err(ProcessError::with_kind(
                FailureKind::Trap,
                format!("journaling a step panicked: {}", panic_message(&*panic)),
            ));
        }
        let status = std::mem::replace(&mut self.out.status, Status::Wait);
        let receive = self.out.receive;
        let mut notes = hold.notes.into_inner();
        if hold.held.get() {
            let mut yields = std::mem::take(&mut self.out.yields);
            let first = hold.first.get().min(yields.len());
            if first > 0 {
                // Those the process lets go before its release: what they complete inline is in
                // the inbox when the release resumes it.
                let mut early: Vec<Yield> = yields.drain(..first).collect();
                self.dispatch(slot, &*process, &body.completed, &mut early, 0, &mut notes)?;
            }
            // The rest is acted on when released, at a later turn (`resume_held`).
            body.held = Some(Box::new(Held {
                status,
                receive,
                yields,
                notes: (!notes.is_empty()).then(|| Box::new(notes)),
                offset: first,
            }));
            return Ok(None);
        }
        let mut yields = std::mem::take(&mut self.out.yields);
        let dispatched = if notes.is_empty() {
            self.dispatch(
                slot,
                &*process,
                &body.completed,
                &mut yields,
                0,
                &mut NoNotes,
            )
        } else {
            self.dispatch(slot, &*process, &body.completed, &mut yields, 0, &mut notes)
        };
        yields.clear();
        self.out.yields = yields;
        dispatched.map(|completed_inline| {
            Some(Stepped {
                status,
                receive,
                completed_inline,
            })
        })
    }

    /// Acts on a held step whose release came: dispatches its yields. `None` if it was woken
    /// before its release (it parks again).
    fn resume_held(
        &mut self,
        slot: &Arc<Slot>,
        body: &mut Body,
    ) -> Option<Result<Stepped, ProcessError>> {
        // The other half of the pair in `Release::release`: the state this turn stored
        // (`Running`) comes before the flag is read, so a release whose wake found the process
        // `Ready` has its flag seen here, and one whose wake came later flags the turn.
        std::sync::atomic::fence(Ordering::SeqCst);
        if !slot.released.swap(false, Ordering::Acquire) {
            return None;
        }
        let Held {
            status,
            receive,
            mut yields,
            mut notes,
            offset,
        } = *body.held.take().expect("checked by the caller");
        let process = body.process.get_mut().expect("present until finished");
        let dispatched = match notes.as_deref_mut() {
            Some(notes) => {
                self.dispatch(slot, &*process, &body.completed, &mut yields, offset, notes)
            }
            None => self.dispatch(
                slot,
                &*process,
                &body.completed,
                &mut yields,
                offset,
                &mut NoNotes,
            ),
        };
        Some(dispatched.map(|completed_inline| Stepped {
            status,
            receive,
            completed_inline,
        }))
    }

    /// Hands each yield the process permits itself (see [`Process::check`]) to its handler, with
    /// the journal's note on it (`notes`, by position in the step's output; the first of
    /// `yields` is at `offset`). A handler that panics fails the process.
    fn dispatch(
        &self,
        slot: &Arc<Slot>,
        process: &dyn Process,
        completed: &RefCell<crate::inbox::Inline>,
        yields: &mut Vec<Yield>,
        offset: usize,
        notes: &mut impl NoteSource,
    ) -> Result<bool, ProcessError> {
        let cx = Context {
            handle: &self.handle,
            slot,
            process,
            inline: completed,
            targets: &self.targets,
        };
        for (index, Yield { tag, command }) in yields.drain(..).enumerate() {
            let note = notes.take(offset + index);
            let kind = command.kind();
            if let Err(refused) = process.check(&command) {
                if kind.expects_completion() {
                    cx.complete(tag, Err(refused));
                }
                continue;
            }
            let Some(handler) = self.handlers.get(kind) else {
                if kind.expects_completion() {
                    cx.complete(tag, Err(unknown_command(kind)));
                }
                continue;
            };
            let request = Request {
                pid: slot.pid,
                tag,
                command,
                note,
            };
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| handler.handle(request, &cx))) {
                return Err(ProcessError::with_kind(
                    FailureKind::Trap,
                    format!(
                        "the handler for command '{}' panicked: {}",
                        kind.name(),
                        panic_message(&*panic)
                    ),
                ));
            }
        }
        Ok(!completed.borrow().is_empty())
    }

    fn finish_with(&self, slot: &Arc<Slot>, result: Result<wfcontract::Payload, ProcessError>) {
        // SAFETY: called by the worker that holds the process `Running`, outside the turn's
        // borrow of the body.
        let mut body = unsafe { slot.body.borrow() };
        self.shared().finish(slot, &mut body, result);
    }

    /// Budget used up: to the back of the local queue, so peers get their turn. Time used up: to
    /// the overrun queue, behind everything else, its charge paid; and the worker looks at the
    /// shared queues before its own next, so work queued there waits for at most one long step
    /// per worker.
    fn requeue(&mut self, slot: Task, started: Reading, out_of_time: bool) {
        if out_of_time {
            self.look_outside = true;
            self.overran = true;
            slot.charge.store(0, Ordering::Relaxed);
            slot.state.requeue();
            self.shared().queues.push_overrun(slot);
            self.shared().idle.notify_one();
            return;
        }
        self.charge(&slot, started);
        slot.state.requeue();
        let pushed = current::with_local_task(self.shared().id(), slot, |local, task| {
            local.push_back(task)
        });
        debug_assert!(pushed.is_ok(), "a worker always has its local queue");
        self.shared().idle.notify_one();
    }
}

/// What a turn does after a step.
enum AfterStep {
    /// The process finished or was queued again: the turn is over.
    Return,
    /// It asked to run again (`Continue`) and may.
    StepAgain,
    /// It waits: park it as this target unless something woke it.
    Park(u8),
}

/// What a step's `receive` leaves that wakes the process: `left` (what the drain left), with
/// what the step's own yields completed, or, when what it takes changed, the inbox anew.
fn settle(
    slot: &Slot,
    body: &mut Body,
    stepped: Stepped,
    left: Leftover,
) -> (Option<Status>, Leftover) {
    let Stepped {
        status,
        receive,
        completed_inline,
    } = stepped;
    // None and all are not worn down by drains: asked again, they leave the inbox as it was, so
    // what was left at the drain still stands, with what the step's own yields completed.
    // (Events pushed from elsewhere during the step set the wake-up flag: see
    // `park_unless_woken`.)
    if receive == body.accepting && (receive == 0 || receive == u32::MAX) {
        let left = Leftover {
            any: left.any || completed_inline,
            ..left
        };
        return (Some(status), left);
    }
    // What it takes from now on decides what is left that wakes it.
    body.accepting = receive;
    let mut inbox = slot.inbox.lock();
    inbox.accept(receive);
    let mut left = Leftover::of(&inbox);
    left.any |= completed_inline;
    (Some(status), left)
}

/// The end of a turn: parks the process as `target` (`BLOCKED` or `IDLE`) unless events that wake
/// it are waiting. Events queued before `left` was taken are in `left`; any pushed since set the
/// wakeup flag, which makes the park fail, and only then is the inbox looked at again (see
/// `state.rs`). Returns true if the process is parked, false if it has events to step with.
pub(crate) fn park_unless_woken(
    state: &State,
    inbox: &Mutex<Inbox>,
    target: u8,
    left: Leftover,
) -> bool {
    let mut wakes = left.wakes(target);
    while !wakes {
        match state.park(target) {
            Park::Parked => return true,
            Park::Notified => wakes = Leftover::of(&inbox.lock()).wakes(target),
        }
    }
    false
}
