//! The run itself: the processes of one test, stepped on the caller's thread in a fixed order,
//! their commands answered as a host answers them, and a virtual clock that jumps to the next
//! thing due when no process can step.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use wfcontract::builtin::RETRY_POLICY_FUNCTION;
use wfcontract::{
    Command, CommandError, ErrorKind as CommandErrorKind, Event, EventKind, Payload, Pid,
    RetryPolicy, Status, StepOutput, Tag, Yield,
};
use wfhost_scheduler::{Events, FailureKind, InitContext, Process, ProcessError};

use super::{Happening, Scheduled, TestEnv, TestRun, What};
use crate::error::{Error, ErrorKind, Result};
use crate::grants::Grants;
use crate::wasm::{Compiled, Limits, WasmProcess, WasmRuntime};
use crate::Failure;

/// Steps a run may take before it is stopped as running away.
const MAX_STEPS: u64 = 1_000_000;

/// The runtime a test's processes run in (the host's default limits; every process keeps its
/// instance), and the module compiled for it.
pub(super) fn runtime(bytes: &[u8]) -> Result<(Arc<WasmRuntime>, Arc<Compiled>)> {
    let wasm = Arc::new(WasmRuntime::standalone(
        Limits::default(),
        None,
        true,
        false,
    )?);
    let compiled = wasm.compile(bytes)?;
    Ok((wasm, compiled))
}

/// What a timer does when it comes due.
#[derive(Debug)]
enum Due {
    /// A sleep of `pid` (yield `tag`) completes.
    Sleep(Pid, Tag),
    /// Something the test scheduled for the top-level workflow.
    Scheduled(Scheduled),
    /// A process cancelled because its parent ended, still running at the end of its grace
    /// period, is ended.
    Terminate(Pid),
}

/// How long a process whose parent ended may take to stop after the cancel, as the host's
/// default `--grace`.
const GRACE: Duration = Duration::from_secs(10);

/// One process of the run.
struct Proc {
    process: WasmProcess,
    entry: String,
    children: Vec<Pid>,
    /// Its last step's status and the messages it asked for.
    status: Status,
    receive: u32,
    /// Its first step is due.
    fresh: bool,
    /// Completions and cancels, in arrival order.
    inbox: VecDeque<Event>,
    /// Messages, until it asks for them.
    mailbox: VecDeque<Event>,
    /// Who joins it: (watcher, yield).
    joiners: Vec<(Pid, Tag)>,
}

impl Proc {
    /// Whether it can step now.
    fn ready(&self) -> bool {
        let message = self.receive > 0 && !self.mailbox.is_empty();
        self.fresh
            || match self.status {
                Status::Continue => true,
                Status::Wait => !self.inbox.is_empty() || message,
                Status::Idle => message || self.inbox.iter().any(|e| e.kind == EventKind::Cancel),
                _ => false,
            }
    }

    /// What it waits for, in words (for a run that is stuck).
    fn waits_for(&self) -> String {
        match self.status {
            Status::Idle => format!("a message (it asks for {})", self.receive),
            _ if self.receive > 0 => {
                "a message or the answer to a command that is not coming".to_string()
            }
            _ => "the answer to a command that is not coming".to_string(),
        }
    }
}

/// A run in progress.
pub(super) struct Driver {
    env: TestEnv,
    now: Duration,
    start_nanos: u64,
    /// `start_nanos + now`, which the processes' WASI clocks read.
    clock: Arc<AtomicU64>,
    procs: BTreeMap<Pid, Proc>,
    ended: HashMap<Pid, std::result::Result<Payload, Failure>>,
    /// Each child's parent.
    parents: HashMap<Pid, Pid>,
    ready: VecDeque<Pid>,
    timers: BTreeMap<(Duration, u64), Due>,
    sleeps: HashMap<(Pid, Tag), (Duration, u64)>,
    sequence: u64,
    next_pid: u64,
    random: u64,
    history: Vec<Happening>,
    steps: u64,
}

impl Drop for Driver {
    fn drop(&mut self) {
        for (_, mut proc) in std::mem::take(&mut self.procs) {
            proc.process.close();
        }
        self.env.wasm.stop();
    }
}

const TOP: Pid = Pid(1);

impl Driver {
    pub(super) fn new(env: TestEnv) -> Driver {
        let start_nanos = env
            .start
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let random = env.seed;
        let mut driver = Driver {
            env,
            now: Duration::ZERO,
            start_nanos,
            clock: Arc::new(AtomicU64::new(start_nanos)),
            procs: BTreeMap::new(),
            ended: HashMap::new(),
            parents: HashMap::new(),
            ready: VecDeque::new(),
            timers: BTreeMap::new(),
            sleeps: HashMap::new(),
            sequence: 0,
            next_pid: 1,
            random,
            history: Vec::new(),
            steps: 0,
        };
        for (after, scheduled) in std::mem::take(&mut driver.env.scheduled) {
            driver.at(after, Due::Scheduled(scheduled));
        }
        driver
    }

    fn at(&mut self, when: Duration, due: Due) -> (Duration, u64) {
        self.sequence += 1;
        let key = (when, self.sequence);
        self.timers.insert(key, due);
        key
    }

    fn happened(&mut self, pid: Pid, what: What) {
        self.history.push(Happening {
            at: self.now,
            pid,
            what,
        });
    }

    pub(super) fn run(mut self, entry: &str, input: Payload) -> Result<TestRun> {
        if !self.env.compiled.info.has_entry(entry) {
            return Err(self.env.compiled.info.unknown_entry(entry));
        }
        self.start(None, entry, input).map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("entry point '{entry}' did not start: {}", e.message()),
            )
        })?;
        loop {
            while let Some(pid) = self.ready.pop_front() {
                if self.procs.get(&pid).is_some_and(Proc::ready) {
                    self.step(pid)?;
                }
                if self.ended.contains_key(&TOP) {
                    return Ok(self.finish());
                }
            }
            let Some(((when, _), due)) = self.timers.pop_first() else {
                return Err(self.stuck());
            };
            if when > self.env.limit {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "the workflow had not ended after {} s of virtual time (TestEnv::limit)",
                        self.env.limit.as_secs()
                    ),
                ));
            }
            self.now = self.now.max(when);
            self.clock.store(
                self.start_nanos
                    .saturating_add(u64::try_from(self.now.as_nanos()).unwrap_or(u64::MAX)),
                Ordering::Release,
            );
            self.fire(due);
        }
    }

    fn finish(&mut self) -> TestRun {
        let outcome = self.ended.get(&TOP).cloned().unwrap_or_else(|| {
            Err(Failure {
                kind: "terminated".into(),
                message: "it did not end".into(),
            })
        });
        TestRun {
            outcome,
            elapsed: self.now,
            history: std::mem::take(&mut self.history),
            started: self.env.start,
        }
    }

    /// Why nothing can go on: every process waits, and nothing is due.
    fn stuck(&self) -> Error {
        let waiting: Vec<String> = self
            .procs
            .iter()
            .map(|(pid, p)| {
                format!(
                    "process {} ({}) waits for {}",
                    pid.0,
                    p.entry,
                    p.waits_for()
                )
            })
            .collect();
        Error::new(
            ErrorKind::Failed,
            format!(
                "every process waits and nothing is due after {} s of virtual time: {}. Send \
                 what it waits for with TestEnv::send_at, or give the host function it calls \
                 with TestEnv::function",
                self.now.as_secs(),
                waiting.join("; ")
            ),
        )
    }

    /// Starts a process of `entry` (a child of `parent`, or the top-level workflow).
    fn start(&mut self, parent: Option<Pid>, entry: &str, input: Payload) -> Result<Pid> {
        let pid = Pid(self.next_pid);
        let mut process = WasmProcess::new(
            Arc::clone(&self.env.wasm),
            crate::wasm::Loaded {
                name: Arc::from("test"),
                compiled: Arc::clone(&self.env.compiled),
                grants: Arc::new(Grants::default().allow_all_functions()),
            }
            .spec(None, Arc::clone(&self.env.wasm.limits)),
        );
        process.set_virtual_clock(crate::wasm::reads::VirtualClock {
            now: Arc::clone(&self.clock),
            start: self.start_nanos,
        });
        process
            .init(&InitContext::new(pid, parent), entry, input)
            .map_err(|e| Error::new(ErrorKind::InvalidInput, e.message()))?;
        self.next_pid += 1;
        self.procs.insert(
            pid,
            Proc {
                process,
                entry: entry.to_string(),
                children: Vec::new(),
                status: Status::Continue,
                receive: 0,
                fresh: true,
                inbox: VecDeque::new(),
                mailbox: VecDeque::new(),
                joiners: Vec::new(),
            },
        );
        if let Some(parent) = parent {
            self.parents.insert(pid, parent);
            if let Some(parent) = self.procs.get_mut(&parent) {
                parent.children.push(pid);
            }
        }
        self.happened(
            pid,
            What::Started {
                entry: entry.to_string(),
            },
        );
        self.ready.push_back(pid);
        Ok(pid)
    }

    fn step(&mut self, pid: Pid) -> Result<()> {
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return Err(Error::new(
                ErrorKind::Limit,
                format!("the run took {MAX_STEPS} steps without ending: it runs away"),
            ));
        }
        let Some(proc) = self.procs.get_mut(&pid) else {
            return Ok(());
        };
        proc.fresh = false;
        // A cancel first, once however often it was asked (as the host delivers it), then
        // the completions in the order they came, then the messages the last step asked for.
        let cancelled = proc.inbox.iter().any(|e| e.kind == EventKind::Cancel);
        let mut events: Vec<Event> = Vec::new();
        if cancelled {
            events.push(Event::cancel());
        }
        events.extend(proc.inbox.drain(..).filter(|e| e.kind != EventKind::Cancel));
        let wanted = usize::try_from(proc.receive).unwrap_or(usize::MAX);
        let taken = wanted.min(proc.mailbox.len());
        let messages: Vec<Event> = proc.mailbox.drain(..taken).collect();
        events.extend(messages.iter().cloned());
        let count = events.len();
        let mut out = StepOutput::new();
        let stepped = proc.process.step(Events::new(&mut events), &mut out);
        self.happened(pid, What::Stepped { events: count });
        for message in messages {
            self.happened(
                pid,
                What::Received {
                    from: message.from,
                    message: message.data,
                },
            );
        }
        if let Err(error) = stepped {
            self.end(pid, Err(failure(&error)));
            return Ok(());
        }
        if let Some(proc) = self.procs.get_mut(&pid) {
            proc.receive = out.receive;
            proc.status = out.status.clone();
        }
        for y in std::mem::take(&mut out.yields) {
            self.dispatch(pid, y);
        }
        match out.status {
            Status::Done(payload) => self.end(pid, Ok(payload)),
            Status::Failed(message) => self.end(
                pid,
                Err(Failure {
                    kind: FailureKind::Failed.name().into(),
                    message,
                }),
            ),
            Status::Cancelled(message) => self.end(
                pid,
                Err(Failure {
                    kind: FailureKind::Cancelled.name().into(),
                    message,
                }),
            ),
            _ => self.wake(pid),
        }
        Ok(())
    }

    /// Queues `pid` to step if it can.
    fn wake(&mut self, pid: Pid) {
        if self.procs.get(&pid).is_some_and(Proc::ready) && !self.ready.contains(&pid) {
            self.ready.push_back(pid);
        }
    }

    fn complete(&mut self, pid: Pid, tag: Tag, result: std::result::Result<Payload, CommandError>) {
        if let Some(proc) = self.procs.get_mut(&pid) {
            proc.inbox.push_back(Event::completion(tag, result));
        }
    }

    fn fire(&mut self, due: Due) {
        match due {
            Due::Sleep(pid, tag) => {
                self.sleeps.remove(&(pid, tag));
                self.complete(pid, tag, Ok(Payload::empty()));
                self.wake(pid);
            }
            Due::Scheduled(Scheduled::Message(message)) => {
                if let Some(proc) = self.procs.get_mut(&TOP) {
                    proc.mailbox.push_back(Event::message(Pid::HOST, message));
                    self.wake(TOP);
                }
            }
            Due::Scheduled(Scheduled::Cancel) => self.cancel(TOP),
            Due::Terminate(pid) => self.end(
                pid,
                Err(Failure {
                    kind: FailureKind::Terminated.name().into(),
                    message: format!(
                        "it did not stop within {} s of the cancel its parent's end sent it",
                        GRACE.as_secs()
                    ),
                }),
            ),
        }
    }

    fn cancel(&mut self, pid: Pid) {
        if let Some(proc) = self.procs.get_mut(&pid) {
            proc.inbox.push_back(Event::cancel());
            self.happened(pid, What::CancelAsked);
            self.wake(pid);
        }
    }

    /// Answers one command of `pid`'s, as a host would.
    fn dispatch(&mut self, pid: Pid, y: Yield) {
        let Yield { tag, command } = y;
        let checked = self.procs.get(&pid).map(|p| p.process.check(&command));
        if let Some(Err(error)) = checked {
            if command.kind().expects_completion() {
                self.complete(pid, tag, Err(error));
            }
            return;
        }
        let answer = match command {
            Command::Sleep(duration) => {
                self.sleep(pid, tag, self.now.saturating_add(duration));
                return;
            }
            Command::SleepUntil(nanos) => {
                let until = Duration::from_nanos(nanos.saturating_sub(self.start_nanos));
                self.sleep(pid, tag, until.max(self.now));
                return;
            }
            Command::Forget(forgotten) => {
                if let Some(key) = self.sleeps.remove(&(pid, forgotten)) {
                    self.timers.remove(&key);
                }
                return;
            }
            Command::Log(record) => {
                self.happened(
                    pid,
                    What::Logged {
                        level: format!("{:?}", record.level).to_lowercase(),
                        message: record.message,
                    },
                );
                return;
            }
            Command::Send(send) => {
                self.happened(
                    pid,
                    What::Sent {
                        to: send.to,
                        message: send.message.clone(),
                    },
                );
                if send.to == Pid::HOST {
                    Ok(Payload::empty())
                } else if let Some(receiver) = self.procs.get_mut(&send.to) {
                    receiver
                        .mailbox
                        .push_back(Event::message(pid, send.message));
                    self.wake(send.to);
                    Ok(Payload::empty())
                } else {
                    Err(no_such_process(send.to))
                }
            }
            Command::Spawn(spawn) => match spawn.module.as_deref() {
                Some(other) if other != "test" => Err(CommandError::new(
                    CommandErrorKind::InvalidInput,
                    format!("a test runs one module: '{other}' is not it"),
                )),
                _ => match self.start(Some(pid), &spawn.entry, spawn.input) {
                    Ok(child) => {
                        self.happened(
                            pid,
                            What::Spawned {
                                child,
                                entry: spawn.entry,
                            },
                        );
                        Payload::to_postcard(&child)
                            .map_err(|e| CommandError::new(CommandErrorKind::Failed, e.to_string()))
                    }
                    Err(error) => Err(CommandError::new(
                        CommandErrorKind::InvalidInput,
                        error.message(),
                    )),
                },
            },
            Command::Join(target) => {
                if let Some(result) = self.ended.get(&target) {
                    let answer = joined(target, result);
                    // Its parent's join reaps it: a second join finds no such process.
                    if self.parents.get(&target) == Some(&pid) {
                        self.ended.remove(&target);
                    }
                    answer
                } else if let Some(proc) = self.procs.get_mut(&target) {
                    proc.joiners.push((pid, tag));
                    return;
                } else {
                    Err(no_such_process(target))
                }
            }
            Command::Cancel(target) => {
                if self.procs.contains_key(&target) {
                    self.cancel(target);
                    Ok(Payload::empty())
                } else {
                    Err(no_such_process(target))
                }
            }
            Command::Call(call) | Command::Retry(wfcontract::RetryRequest { call, .. }) => {
                let output = if call.name == RETRY_POLICY_FUNCTION {
                    Payload::encode(call.input.encoding, &None::<RetryPolicy>)
                        .map_err(|e| CommandError::new(CommandErrorKind::Failed, e.to_string()))
                } else {
                    match self.env.functions.get_mut(&call.name) {
                        Some(function) => function(&call.input),
                        None => Err(CommandError::new(
                            CommandErrorKind::UnknownCommand,
                            format!(
                                "no host function named '{}' in this test: give it with \
                                 TestEnv::function",
                                call.name
                            ),
                        )),
                    }
                };
                if call.name != RETRY_POLICY_FUNCTION {
                    self.happened(
                        pid,
                        What::Called {
                            function: call.name,
                            input: call.input,
                            output: output.clone(),
                        },
                    );
                }
                output
            }
            Command::Now => {
                let nanos = self
                    .start_nanos
                    .saturating_add(u64::try_from(self.now.as_nanos()).unwrap_or(u64::MAX));
                Payload::to_postcard(&nanos)
                    .map_err(|e| CommandError::new(CommandErrorKind::Failed, e.to_string()))
            }
            Command::Random => {
                let value = splitmix(&mut self.random);
                Payload::to_postcard(&value)
                    .map_err(|e| CommandError::new(CommandErrorKind::Failed, e.to_string()))
            }
        };
        self.complete(pid, tag, answer);
    }

    fn sleep(&mut self, pid: Pid, tag: Tag, until: Duration) {
        if let Some(old) = self.sleeps.remove(&(pid, tag)) {
            self.timers.remove(&old);
        }
        let key = self.at(until, Due::Sleep(pid, tag));
        self.sleeps.insert((pid, tag), key);
        self.happened(pid, What::Slept { until });
    }

    /// Ends `pid` with `result`: its joiners hear of it, and its children that still run end
    /// with it.
    fn end(&mut self, pid: Pid, result: std::result::Result<Payload, Failure>) {
        let Some(mut proc) = self.procs.remove(&pid) else {
            return;
        };
        proc.process.close();
        self.happened(
            pid,
            What::Ended {
                result: result.clone(),
            },
        );
        let forgotten: Vec<(Pid, Tag)> = self
            .sleeps
            .keys()
            .filter(|(p, _)| *p == pid)
            .copied()
            .collect();
        for key in forgotten {
            if let Some(timer) = self.sleeps.remove(&key) {
                self.timers.remove(&timer);
            }
        }
        let parent = self.parents.get(&pid).copied();
        let mut reaped = false;
        for (watcher, tag) in proc.joiners {
            self.complete(watcher, tag, joined(pid, &result));
            self.wake(watcher);
            reaped |= Some(watcher) == parent;
        }
        if !reaped {
            self.ended.insert(pid, result);
        }
        // Its children that still run are cancelled, and ended if they do not stop in time.
        let now = self.now;
        for child in proc.children {
            if self.procs.contains_key(&child) {
                self.cancel(child);
                self.at(now.saturating_add(GRACE), Due::Terminate(child));
            }
        }
    }
}

/// How a process's failure is shown.
fn failure(error: &ProcessError) -> Failure {
    Failure {
        kind: error.kind().name().into(),
        message: error.message().into(),
    }
}

/// What a join of `pid`, which ended with `result`, answers.
fn joined(
    pid: Pid,
    result: &std::result::Result<Payload, Failure>,
) -> std::result::Result<Payload, CommandError> {
    match result {
        Ok(payload) => Ok(payload.clone()),
        Err(failure) => {
            let cancelled = ["cancelled", "terminated", "timeout"].contains(&failure.kind.as_str());
            let (kind, verb) = if cancelled {
                (CommandErrorKind::ChildCancelled, "was stopped")
            } else {
                (CommandErrorKind::ChildFailed, "failed")
            };
            Err(CommandError::new(
                kind,
                format!("process {pid} {verb}: {}", failure.message),
            ))
        }
    }
}

fn no_such_process(pid: Pid) -> CommandError {
    CommandError::new(
        CommandErrorKind::NoSuchProcess,
        format!("process {pid} does not exist or has ended"),
    )
}

/// The next value of a splitmix64 sequence: what `ctx.random()` answers, the same each run.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
