//! The board of activity tasks in memory, for one host: tasks by number, a queue of waiting
//! tasks per function, the pollers waiting per function, and the deadlines of taken tasks, which
//! a reaper thread watches.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::{Condvar, Mutex};
use tokio::sync::oneshot;
use wfcontract::{CommandError, ErrorKind, Payload};

use super::{wall, FunctionTasks, Outcomes, Task, TaskError, TaskSettings};

/// The longest the reaper sleeps, so that it notices the board has gone.
const REAPER_NAP: Duration = Duration::from_secs(1);

type Done = oneshot::Sender<Result<Payload, CommandError>>;

/// The board of activity tasks in memory, for one host (the engine's `Tasks::new`). For the
/// engine; not for applications.
pub struct Board {
    settings: TaskSettings,
    /// Where the outcomes of durable workflows' calls are kept from a completion's answer until
    /// the step that takes each is journaled (the host's store), once a host is built with it.
    outcomes: OnceLock<Arc<dyn Outcomes>>,
    state: Mutex<BoardState>,
    /// Wakes the reaper when an earlier deadline appears.
    reaper: Condvar,
}

impl std::fmt::Debug for Board {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (queued, taken) = self.counts();
        f.debug_struct("Board")
            .field("queued", &queued)
            .field("taken", &taken)
            .finish()
    }
}

#[derive(Default)]
struct BoardState {
    next: u64,
    next_waiter: u64,
    tasks: HashMap<u64, BoardTask>,
    /// Numbers of queued tasks per function, oldest first. A number whose task is gone or taken
    /// is skipped when met (withdrawals do not search the queue).
    queues: HashMap<Arc<str>, VecDeque<u64>>,
    /// Pollers waiting per function, oldest first; one waiting on several functions is in each
    /// list, and the first task to reach it takes it from all.
    waiters: HashMap<Arc<str>, VecDeque<Arc<Waiter>>>,
    /// Taken tasks by deadline.
    deadlines: BTreeSet<(Instant, u64)>,
    /// Numbers in `queues` whose tasks were withdrawn: compacted away once they are many.
    stale: usize,
}

struct BoardTask {
    function: Arc<str>,
    input: Payload,
    key: Option<String>,
    /// The call's span (W3C `traceparent`), for its worker.
    traceparent: Option<String>,
    /// A durable workflow's call: the workflow's number and the call's tag.
    call: Option<(u64, u64)>,
    /// Deliveries so far.
    attempt: u32,
    /// The current delivery's token and deadline, while a worker holds it.
    taken: Option<(u64, Instant)>,
    done: Option<Done>,
    /// When the call made it.
    queued: Instant,
}

struct Waiter {
    id: u64,
    slot: Mutex<Option<oneshot::Sender<Task>>>,
}

fn token() -> u64 {
    let mut bytes = [0; 8];
    if getrandom::fill(&mut bytes).is_err() {
        // Names need not be secret (a worker is trusted by its token), only fresh.
        return Instant::now().elapsed().as_nanos() as u64 ^ 0x9e37_79b9_7f4a_7c15;
    }
    u64::from_le_bytes(bytes)
}

fn name(number: u64, token: u64) -> String {
    format!("{number}.{token:016x}")
}

fn parse(task: &str) -> Option<(u64, u64)> {
    let (number, token) = task.split_once('.')?;
    if token.len() != 16 {
        return None;
    }
    Some((number.parse().ok()?, u64::from_str_radix(token, 16).ok()?))
}

impl BoardState {
    /// Hands task `number` to the oldest poller of its function still waiting, or queues it
    /// (at the front if it had been taken before: it is older than those queued).
    fn offer(&mut self, number: u64, timeout: Duration) -> bool {
        let Some(function) = self.tasks.get(&number).map(|e| Arc::clone(&e.function)) else {
            return false;
        };
        let mut earlier_deadline = false;
        let mut delivered = false;
        while let Some(waiter) = self
            .waiters
            .get_mut(&function)
            .and_then(VecDeque::pop_front)
        {
            let Some(sender) = waiter.slot.lock().take() else {
                continue;
            };
            let (task, deadline) = self.deliver(number, timeout);
            match sender.send(task) {
                Ok(()) => {
                    earlier_deadline = self.deadlines.first().is_some_and(|&(d, _)| d == deadline);
                    delivered = true;
                    break;
                }
                // The poller stopped waiting just now: undo, and try the next.
                Err(_) => self.untake(number),
            }
        }
        if !delivered {
            let again = self.tasks.get(&number).is_some_and(|e| e.attempt > 0);
            let queue = self.queues.entry(function).or_default();
            if again {
                queue.push_front(number);
            } else {
                queue.push_back(number);
            }
        }
        earlier_deadline
    }

    /// Counts a queued task withdrawn; once the numbers left behind in the queues are many (and
    /// most of what the queues hold), the queues are compacted: each withdrawal costs O(1) over
    /// time, and a queue whose function no worker polls does not grow without bound.
    fn withdrew_queued(&mut self) {
        self.stale += 1;
        let queued: usize = self.queues.values().map(VecDeque::len).sum();
        if self.stale >= 1024 && self.stale * 2 >= queued {
            let tasks = &self.tasks;
            for queue in self.queues.values_mut() {
                queue.retain(|n| tasks.get(n).is_some_and(|e| e.taken.is_none()));
            }
            self.queues.retain(|_, queue| !queue.is_empty());
            self.stale = 0;
        }
    }

    /// Marks task `number` taken, until `timeout` from now.
    fn deliver(&mut self, number: u64, timeout: Duration) -> (Task, Instant) {
        let deadline = Instant::now() + timeout;
        let token = token();
        let entry = self.tasks.get_mut(&number).expect("delivered tasks exist");
        entry.attempt += 1;
        entry.taken = Some((token, deadline));
        self.deadlines.insert((deadline, number));
        let task = Task::new(
            name(number, token),
            entry.function.to_string(),
            entry.input.clone(),
            entry.key.clone(),
            entry.attempt,
            wall(deadline),
        )
        .waited(entry.queued.elapsed())
        .traceparent(entry.traceparent.clone());
        (task, deadline)
    }

    /// Undoes [`deliver`](Self::deliver) for a delivery that reached nobody.
    fn untake(&mut self, number: u64) {
        if let Some(entry) = self.tasks.get_mut(&number) {
            if let Some((_, deadline)) = entry.taken.take() {
                self.deadlines.remove(&(deadline, number));
            }
            entry.attempt -= 1;
        }
    }

    /// The oldest queued task of `function`, taken.
    fn take_queued(&mut self, function: &str, timeout: Duration) -> Option<(Task, Instant)> {
        loop {
            let number = self.queues.get_mut(function)?.pop_front()?;
            if self.tasks.get(&number).is_some_and(|e| e.taken.is_none()) {
                return Some(self.deliver(number, timeout));
            }
        }
    }

    /// The delivery `task` names, if it is still the current one and in time.
    fn current(&mut self, task: &str, now: Instant) -> Result<u64, TaskError> {
        let (number, token) = parse(task).ok_or_else(|| TaskError::Unknown(task.into()))?;
        if number >= self.next {
            return Err(TaskError::Unknown(task.into()));
        }
        let moved = |why: String| TaskError::MovedOn {
            task: task.into(),
            why,
        };
        let Some(entry) = self.tasks.get(&number) else {
            return Err(moved(
                "it is finished, or the workflow stopped waiting for it".into(),
            ));
        };
        match entry.taken {
            Some((current, deadline)) if current == token => {
                if deadline <= now {
                    Err(moved("its deadline passed before this came".into()))
                } else {
                    Ok(number)
                }
            }
            _ => Err(moved(format!(
                "its deadline passed and it was offered again (it is at attempt {} now)",
                entry.attempt
            ))),
        }
    }
}

impl Board {
    /// An empty board, with its reaper thread.
    pub fn start(settings: TaskSettings) -> Arc<Board> {
        let board = Arc::new(Board {
            settings,
            outcomes: OnceLock::new(),
            state: Mutex::new(BoardState::default()),
            reaper: Condvar::new(),
        });
        let weak = Arc::downgrade(&board);
        let spawned = std::thread::Builder::new()
            .name("wfhost-tasks".into())
            .spawn(move || reap(weak));
        if let Err(error) = spawned {
            // Without the reaper, tasks whose workers vanish wait for a completion or heartbeat
            // (which finds them late and offers them again); say so.
            tracing::error!("the task board's reaper thread did not start: {error}");
        }
        board
    }

    fn timeout(&self) -> Duration {
        self.settings.timeout
    }

    /// Keeps the outcomes of durable workflows' calls in `outcomes` (the host's store).
    pub fn keep_outcomes(&self, outcomes: Arc<dyn Outcomes>) {
        let _ = self.outcomes.set(outcomes);
    }

    /// The function task `task` calls, if it is on the board.
    pub fn function_of(&self, task: &str) -> Option<String> {
        let (number, _) = parse(task)?;
        let state = self.state.lock();
        state.tasks.get(&number).map(|e| e.function.to_string())
    }

    /// Each function's tasks: how many wait for a worker (and since when the oldest has been
    /// waiting), how many workers hold.
    pub fn summary(&self) -> Vec<FunctionTasks> {
        let state = self.state.lock();
        let now = Instant::now();
        let mut functions: HashMap<&str, FunctionTasks> = HashMap::new();
        for entry in state.tasks.values() {
            let summary = functions
                .entry(&entry.function)
                .or_insert_with(|| FunctionTasks::new(entry.function.to_string()));
            if entry.taken.is_some() {
                summary.in_flight += 1;
            } else {
                summary.waiting += 1;
                let age = now.saturating_duration_since(entry.queued);
                summary.oldest_waiting = Some(summary.oldest_waiting.map_or(age, |a| a.max(age)));
            }
        }
        let mut functions: Vec<FunctionTasks> = functions.into_values().collect();
        functions.sort_by(|a, b| a.function.cmp(&b.function));
        functions
    }

    /// Tasks queued and taken.
    pub fn counts(&self) -> (usize, usize) {
        let state = self.state.lock();
        let taken = state.deadlines.len();
        (state.tasks.len() - taken, taken)
    }

    /// The next task for one of `functions`, waiting up to `wait` for one.
    pub async fn poll(&self, functions: &[String], wait: Duration) -> Option<Task> {
        let (sender, mut receiver) = oneshot::channel();
        let waiter = {
            let mut state = self.state.lock();
            for function in functions {
                if let Some((task, deadline)) = state.take_queued(function, self.timeout()) {
                    self.wake_reaper(&state, deadline);
                    return Some(task);
                }
            }
            if wait.is_zero() {
                return None;
            }
            state.next_waiter += 1;
            let waiter = Arc::new(Waiter {
                id: state.next_waiter,
                slot: Mutex::new(Some(sender)),
            });
            for function in functions {
                state
                    .waiters
                    .entry(Arc::from(function.as_str()))
                    .or_default()
                    .push_back(Arc::clone(&waiter));
            }
            waiter
        };
        let _leave = Leave {
            board: self,
            waiter: &waiter,
            functions,
        };
        match tokio::time::timeout(wait, &mut receiver).await {
            Ok(Ok(task)) => Some(task),
            _ => {
                // The wait ran out. Unless an offer took this poller's slot first, nothing will
                // be sent; if one did, it sent under the state's lock, so once the lock is had
                // the task is in the channel: still this poller's.
                if waiter.slot.lock().take().is_some() {
                    return None;
                }
                drop(self.state.lock());
                receiver.try_recv().ok()
            }
        }
    }

    fn wake_reaper(&self, state: &BoardState, deadline: Instant) {
        if state.deadlines.first().is_some_and(|&(d, _)| d == deadline) {
            self.reaper.notify_one();
        }
    }

    /// Completes task `task`'s current delivery with `result`. A durable workflow's outcome is
    /// kept in the host's store first (the answer then means the workflow has it, whatever
    /// happens to the host before the step that takes it is journaled): blocks on that write.
    pub fn complete(
        &self,
        task: &str,
        result: Result<Payload, CommandError>,
    ) -> Result<(), TaskError> {
        let (number, call) = {
            let mut state = self.state.lock();
            let number = self.held(&mut state, task, Instant::now())?;
            let entry = state.tasks.get_mut(&number).expect("current tasks exist");
            // This delivery is over: another completion of it, or a heartbeat, is refused, and
            // no deadline offers it again meanwhile.
            let taken = entry.taken.take();
            let call = entry.call;
            if let Some((_, deadline)) = taken {
                state.deadlines.remove(&(deadline, number));
            }
            (number, call)
        };
        if let (Some(call), Some(outcomes)) = (call, self.outcomes.get()) {
            if let Err(why) = outcomes.keep(call, &result) {
                // Not kept, so not applied: the task goes to the next poll.
                let mut state = self.state.lock();
                if state.tasks.contains_key(&number) && state.offer(number, self.timeout()) {
                    self.reaper.notify_one();
                }
                return Err(TaskError::Unavailable(format!(
                    "the outcome could not be kept in the store ({why}); the task is offered again"
                )));
            }
        }
        let done = self
            .state
            .lock()
            .tasks
            .remove(&number)
            .and_then(|mut entry| entry.done.take());
        if let Some(done) = done {
            // The call may have been given up on this instant; then nobody hears, as intended.
            let _ = done.send(result);
        }
        Ok(())
    }

    /// Moves task `task`'s deadline on: the new deadline.
    pub fn heartbeat(&self, task: &str) -> Result<SystemTime, TaskError> {
        let mut state = self.state.lock();
        let now = Instant::now();
        let number = self.held(&mut state, task, now)?;
        let deadline = now + self.timeout();
        let entry = state.tasks.get_mut(&number).expect("current tasks exist");
        let (token, old) = entry.taken.expect("current tasks are taken");
        entry.taken = Some((token, deadline));
        state.deadlines.remove(&(old, number));
        state.deadlines.insert((deadline, number));
        Ok(wall(deadline))
    }

    /// Gives task `task` back: a worker that will not finish it (it is stopping) lets the next
    /// poll have it now rather than at its deadline. Its attempt counts on with that delivery.
    pub fn release(&self, task: &str) -> Result<(), TaskError> {
        let mut state = self.state.lock();
        let number = self.held(&mut state, task, Instant::now())?;
        let (_, deadline) = state.tasks[&number].taken.expect("current tasks are taken");
        self.offer_again(&mut state, number, deadline, "a worker gave a task back");
        Ok(())
    }

    /// The number of the task whose current delivery `task` names, or why it is not one: a
    /// delivery past its deadline that the reaper has not seen yet goes to another worker now.
    fn held(&self, state: &mut BoardState, task: &str, now: Instant) -> Result<u64, TaskError> {
        state
            .current(task, now)
            .inspect_err(|_| self.expire_late(state, task))
    }

    /// A completion or heartbeat that came after its delivery's deadline, before the reaper saw
    /// it: the task goes to another worker now.
    fn expire_late(&self, state: &mut BoardState, task: &str) {
        let Some((number, token)) = parse(task) else {
            return;
        };
        let late = state
            .tasks
            .get(&number)
            .and_then(|e| e.taken)
            .filter(|&(current, deadline)| current == token && deadline <= Instant::now());
        if let Some((_, deadline)) = late {
            self.expire(state, number, deadline);
        }
    }

    /// Offers a taken task whose deadline passed to another worker.
    fn expire(&self, state: &mut BoardState, number: u64, deadline: Instant) {
        let why = "a task's worker neither completed it nor heartbeat by its deadline";
        self.offer_again(state, number, deadline, why);
    }

    /// Offers taken task `number` (its delivery's deadline `deadline`) to another worker, for
    /// the reason `why` says.
    fn offer_again(&self, state: &mut BoardState, number: u64, deadline: Instant, why: &str) {
        state.deadlines.remove(&(deadline, number));
        if let Some(entry) = state.tasks.get_mut(&number) {
            entry.taken = None;
            tracing::info!(
                function = %entry.function,
                attempt = entry.attempt,
                "{why}: offering it again"
            );
        }
        if state.offer(number, self.timeout()) {
            self.reaper.notify_one();
        }
    }

    /// Calls `function` with `input` through a task, to its outcome. `key`: the call's
    /// idempotency key; `call`: a durable workflow's (workflow, tag), whose outcome is kept.
    pub async fn call(
        &self,
        function: Arc<str>,
        input: Payload,
        key: Option<String>,
        traceparent: Option<String>,
        call: Option<(u64, u64)>,
    ) -> Result<Payload, CommandError> {
        // Answered before the host stopped, and kept: the answer, with no task.
        if let (Some(call), Some(outcomes)) = (call, self.outcomes.get()) {
            if let Some(outcome) = outcomes.kept(call) {
                return outcome;
            }
        }
        let (done, result) = oneshot::channel();
        let number = {
            let mut state = self.state.lock();
            if state.tasks.len() >= self.settings.max_tasks {
                return Err(CommandError::new(
                    ErrorKind::LimitReached,
                    format!(
                        "{} tasks are waiting for activity workers, the most this host holds; \
                         retry later",
                        self.settings.max_tasks
                    ),
                ));
            }
            let number = state.next;
            state.next += 1;
            state.tasks.insert(
                number,
                BoardTask {
                    function: Arc::clone(&function),
                    input,
                    key,
                    traceparent,
                    call,
                    attempt: 0,
                    taken: None,
                    done: Some(done),
                    queued: Instant::now(),
                },
            );
            if state.offer(number, self.timeout()) {
                self.reaper.notify_one();
            }
            number
        };
        let _withdraw = Withdraw {
            board: self,
            number,
        };
        match result.await {
            Ok(result) => result,
            Err(_) => Err(CommandError::new(
                ErrorKind::Unavailable,
                format!("the task for '{function}' was dropped from the board"),
            )),
        }
    }
}

/// Takes a poller off the waiting lists when its poll ends, however it ends.
struct Leave<'a> {
    board: &'a Board,
    waiter: &'a Arc<Waiter>,
    functions: &'a [String],
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.waiter.slot.lock().take();
        let mut state = self.board.state.lock();
        for function in self.functions {
            if let Some(list) = state.waiters.get_mut(function.as_str()) {
                list.retain(|w| w.id != self.waiter.id);
                if list.is_empty() {
                    state.waiters.remove(function.as_str());
                }
            }
        }
    }
}

/// Takes a call's task off the board when the call ends, however it ends (completed: already
/// gone; timed out, cancelled, the host stopping: withdrawn).
struct Withdraw<'a> {
    board: &'a Board,
    number: u64,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        let mut state = self.board.state.lock();
        if let Some(entry) = state.tasks.remove(&self.number) {
            match entry.taken {
                Some((_, deadline)) => {
                    state.deadlines.remove(&(deadline, self.number));
                }
                None => state.withdrew_queued(),
            }
        }
    }
}

/// The reaper: offers again each taken task whose deadline passes, until the board goes.
fn reap(board: Weak<Board>) {
    loop {
        let Some(board) = board.upgrade() else {
            return;
        };
        let mut state = board.state.lock();
        let now = Instant::now();
        while let Some(&(deadline, number)) = state.deadlines.first() {
            if deadline > now {
                break;
            }
            board.expire(&mut state, number, deadline);
        }
        let nap = now + REAPER_NAP;
        let until = state
            .deadlines
            .first()
            .map_or(nap, |&(deadline, _)| deadline.min(nap));
        board.reaper.wait_until(&mut state, until);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(text: &str) -> Payload {
        Payload::json_bytes(text.as_bytes().to_vec())
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    #[test]
    fn a_task_goes_to_a_poller_and_its_completion_to_the_call() {
        let rt = runtime();
        let board = Board::start(TaskSettings::default());
        rt.block_on(async {
            let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
            let call = board.call(
                "charge".into(),
                json("7"),
                Some("w#3".into()),
                Some(parent.into()),
                None,
            );
            let mut call = std::pin::pin!(call);
            assert!(futures::poll!(call.as_mut()).is_pending());
            assert_eq!(board.counts(), (1, 0));
            let functions = ["other".to_string(), "charge".to_string()];
            let task = board.poll(&functions, Duration::ZERO).await.unwrap();
            assert_eq!((task.function.as_str(), task.attempt), ("charge", 1));
            assert_eq!(task.idempotency_key.as_deref(), Some("w#3"));
            assert_eq!(task.traceparent.as_deref(), Some(parent));
            assert_eq!(task.input, json("7"));
            assert_eq!(board.counts(), (0, 1));
            board.complete(&task.task, Ok(json("\"ok\""))).unwrap();
            assert_eq!(call.await, Ok(json("\"ok\"")));
            // Never applied twice.
            let again = board.complete(&task.task, Ok(json("1"))).unwrap_err();
            assert!(matches!(again, TaskError::MovedOn { .. }), "{again}");
            assert_eq!(
                board.complete("99.0000000000000000", Ok(json("1"))),
                Err(TaskError::Unknown("99.0000000000000000".into()))
            );
            assert_eq!(board.counts(), (0, 0));
        });
    }

    #[test]
    fn a_waiting_poller_gets_the_next_task_and_a_lapsed_one_goes_to_another() {
        let rt = runtime();
        let board = Board::start(TaskSettings {
            timeout: Duration::from_millis(1),
            ..TaskSettings::default()
        });
        rt.block_on(async {
            let functions = ["charge".to_string()];
            let poll = board.poll(&functions, Duration::from_secs(30));
            let mut poll = std::pin::pin!(poll);
            assert!(futures::poll!(poll.as_mut()).is_pending());
            let call = board.call("charge".into(), json("1"), None, None, None);
            let mut call = std::pin::pin!(call);
            assert!(futures::poll!(call.as_mut()).is_pending());
            let first = poll.await.unwrap();
            assert_eq!(first.attempt, 1);
            // The first worker vanishes; its deadline (1 ms) passes, and the task is offered
            // again: to a poller that waits for it.
            let second = board
                .poll(&functions, Duration::from_secs(30))
                .await
                .unwrap();
            assert_eq!(second.attempt, 2);
            assert_ne!(first.task, second.task);
            let late = board.complete(&first.task, Ok(json("1"))).unwrap_err();
            assert!(late.to_string().contains("offered again"), "{late}");
            board.heartbeat(&second.task).ok();
            // The second may be late too (1 ms); either it lands or it is refused, never both.
            match board.complete(&second.task, Ok(json("2"))) {
                Ok(()) => assert_eq!(call.await, Ok(json("2"))),
                Err(TaskError::MovedOn { .. }) => {
                    let third = board
                        .poll(&functions, Duration::from_secs(30))
                        .await
                        .unwrap();
                    assert_eq!(third.attempt, 3);
                }
                Err(other) => panic!("{other}"),
            }
        });
    }

    #[test]
    fn a_task_given_back_goes_to_the_next_poll_at_once() {
        let rt = runtime();
        let board = Board::start(TaskSettings::default());
        rt.block_on(async {
            let call = board.call("charge".into(), json("1"), Some("k".into()), None, None);
            let mut call = std::pin::pin!(call);
            assert!(futures::poll!(call.as_mut()).is_pending());
            let functions = ["charge".to_string()];
            let first = board.poll(&functions, Duration::ZERO).await.unwrap();
            board.release(&first.task).unwrap();
            assert_eq!(board.counts(), (1, 0));
            // Not at its deadline (a minute away): now, with the same key, its attempt on.
            let second = board.poll(&functions, Duration::ZERO).await.unwrap();
            assert_eq!(
                (second.attempt, second.idempotency_key.as_deref()),
                (2, Some("k"))
            );
            // The delivery given back is refused, and gives nothing back twice.
            let late = board.complete(&first.task, Ok(json("1"))).unwrap_err();
            assert!(matches!(late, TaskError::MovedOn { .. }), "{late}");
            assert!(board.release(&first.task).is_err());
            board.complete(&second.task, Ok(json("2"))).unwrap();
            assert_eq!(call.await, Ok(json("2")));
        });
    }

    #[test]
    fn withdrawn_tasks_do_not_pile_up_in_a_queue_nobody_polls() {
        let rt = runtime();
        let board = Board::start(TaskSettings::default());
        rt.block_on(async {
            for n in 0..5_000u64 {
                let call = board.call("idle".into(), json(&n.to_string()), None, None, None);
                let mut call = Box::pin(call);
                assert!(futures::poll!(call.as_mut()).is_pending());
            }
        });
        let state = board.state.lock();
        assert!(state.tasks.is_empty());
        let queued: usize = state.queues.values().map(VecDeque::len).sum();
        assert!(queued < 1024, "{queued} numbers left in the queues");
    }

    #[test]
    fn a_call_given_up_on_leaves_the_board() {
        let rt = runtime();
        let board = Board::start(TaskSettings::default());
        rt.block_on(async {
            let call = board.call("charge".into(), json("1"), None, None, None);
            let mut call = Box::pin(call);
            assert!(futures::poll!(call.as_mut()).is_pending());
            drop(call);
            assert_eq!(board.counts(), (0, 0));
            let functions = ["charge".to_string()];
            assert!(board.poll(&functions, Duration::ZERO).await.is_none());
        });
    }
}
