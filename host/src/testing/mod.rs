//! Tests of workflows with time skipping: a workflow module run in this process, on one thread,
//! with a virtual clock. When every process of the run waits, the clock jumps to the next thing
//! due (a timer, a message or a cancel the test scheduled), so a workflow that sleeps thirty days
//! runs in milliseconds. Host functions and activities are closures of the test; messages reach
//! the workflow at the virtual times the test chooses; the run's history says what happened when.
//!
//! ```no_run
//! use std::time::Duration;
//! use wfhost::testing::TestEnv;
//!
//! let run = TestEnv::new("target/wasm32-wasip1/release/reminders.wasm")?
//!     .function("reminder_text", |day: u32| Ok(format!("day {day}: water the plants")))
//!     .send_at(Duration::from_secs(10 * 86_400 + 60), &"done")
//!     .run("remind", &30u32)?;
//! assert_eq!(run.result::<u32>()?, 10);
//! assert_eq!(run.sent_to_host::<String>()?.len(), 10);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! What it runs is the module as a host runs it (the same sandbox and limits, the same answers to
//! every command), except time: sleeps, `ctx.now()` and the timeouts built on them follow the
//! virtual clock, which starts at [`TestEnv::starting_at`] (2026-01-01T00:00:00Z unless told
//! otherwise); a step itself takes no virtual time. WASI's clocks (what `std::time` reads inside
//! a Rust guest, `time.time()` in Python, `Date.now()` in JavaScript) read the virtual clock too,
//! and the monotonic one counts from the run's start. `ctx.random()` is seeded ([`TestEnv::seed`]), so a run
//! is the same each time. Nothing is journaled: this tests what a workflow does, not how a host
//! keeps it (`wfhost replay` and the durable tests do that). As on a host, a cancel reaches a
//! process before its other events, a parent's join takes its child's result (a second join
//! finds no such process), and a process whose parent ends is cancelled and, if it has not
//! stopped 10 s of virtual time later, ended. A spawn of another module than the one under test
//! is refused.

mod driver;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;
use serde::Serialize;
use wfcontract::{CommandError, ErrorKind as CommandErrorKind, Payload, Pid};

use crate::error::{Error, ErrorKind, Result};
use crate::wasm::{Compiled, WasmRuntime};
use crate::Failure;

/// A host function or activity, as a test gives it.
type Function = Box<dyn FnMut(&Payload) -> std::result::Result<Payload, CommandError>>;

/// A workflow module ready to run under a virtual clock, with what the test gives it.
pub struct TestEnv {
    wasm: Arc<WasmRuntime>,
    compiled: Arc<Compiled>,
    functions: HashMap<String, Function>,
    scheduled: Vec<(Duration, Scheduled)>,
    start: SystemTime,
    seed: u64,
    limit: Duration,
    /// What the test gave that cannot be used: the run says so.
    refused: Option<String>,
}

impl std::fmt::Debug for TestEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEnv")
            .field("functions", &self.functions.keys().collect::<Vec<_>>())
            .field("start", &self.start)
            .finish_non_exhaustive()
    }
}

/// Something the test scheduled for the top-level workflow.
#[derive(Clone, Debug)]
enum Scheduled {
    Message(Payload),
    Cancel,
}

impl TestEnv {
    /// The module at `path` (a `.wasm` file), compiled.
    pub fn new(path: impl AsRef<Path>) -> Result<TestEnv> {
        TestEnv::from_bytes(&crate::modules::read_module(path.as_ref())?)
    }

    /// The module `bytes`, compiled.
    pub fn from_bytes(bytes: &[u8]) -> Result<TestEnv> {
        let (wasm, compiled) = driver::runtime(bytes)?;
        Ok(TestEnv {
            wasm,
            compiled,
            functions: HashMap::new(),
            scheduled: Vec::new(),
            // 2026-01-01T00:00:00Z.
            start: SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600),
            seed: 0x5eed,
            limit: Duration::from_secs(100 * 365 * 86_400),
            refused: None,
        })
    }

    /// Host function (or activity) `name` answered by `f`: its input decoded as `I`, its output
    /// encoded as the call's input was. An `Err` is the call's failure, as a real function's
    /// would be (the SDK's retries, if the call has a policy, apply and take virtual time).
    pub fn function<I, O, F>(mut self, name: &str, mut f: F) -> TestEnv
    where
        I: DeserializeOwned,
        O: Serialize,
        F: FnMut(I) -> std::result::Result<O, CommandError> + 'static,
    {
        self.functions.insert(
            name.to_string(),
            Box::new(move |input: &Payload| {
                let value: I = input.decode().map_err(|e| {
                    CommandError::new(
                        CommandErrorKind::InvalidInput,
                        format!("the test's function could not decode its input: {e}"),
                    )
                })?;
                let output = f(value)?;
                Payload::encode(input.encoding, &output).map_err(|e| {
                    CommandError::new(
                        CommandErrorKind::Failed,
                        format!("the test's function's output did not encode: {e}"),
                    )
                })
            }),
        );
        self
    }

    /// Host function `name` answered by `f` with payloads as they are.
    pub fn function_raw(
        mut self,
        name: &str,
        f: impl FnMut(&Payload) -> std::result::Result<Payload, CommandError> + 'static,
    ) -> TestEnv {
        self.functions.insert(name.to_string(), Box::new(f));
        self
    }

    /// Sends the top-level workflow `message` (as JSON) from the host, `after` its start by the
    /// virtual clock.
    pub fn send_at<T: Serialize + ?Sized>(mut self, after: Duration, message: &T) -> TestEnv {
        match Payload::to_json(message) {
            Ok(payload) => self.scheduled.push((after, Scheduled::Message(payload))),
            Err(error) => {
                self.refused.get_or_insert_with(|| {
                    format!("a message for send_at does not encode: {error}")
                });
            }
        }
        self
    }

    /// Cancels the top-level workflow `after` its start by the virtual clock.
    pub fn cancel_at(mut self, after: Duration) -> TestEnv {
        self.scheduled.push((after, Scheduled::Cancel));
        self
    }

    /// Where the virtual clock starts (what `ctx.now()` answers before any time passes).
    pub fn starting_at(mut self, start: SystemTime) -> TestEnv {
        self.start = start;
        self
    }

    /// The seed of what `ctx.random()` answers.
    pub fn seed(mut self, seed: u64) -> TestEnv {
        self.seed = seed;
        self
    }

    /// How much virtual time a run may take (100 years unless told): past it, the run stops
    /// and says so, rather than skip ahead for ever through a workflow that never ends.
    pub fn limit(mut self, limit: Duration) -> TestEnv {
        self.limit = limit;
        self
    }

    /// Runs entry point `entry` with `input` (as JSON) until it ends, skipping time whenever
    /// every process waits. An `Err` is a run that could not go on: the entry point or its
    /// input refused, every process waiting with nothing left to come (a message never sent,
    /// say: the error says what each waits for), or the time limit passed.
    pub fn run<I: Serialize + ?Sized>(self, entry: &str, input: &I) -> Result<TestRun> {
        if let Some(why) = &self.refused {
            return Err(Error::new(ErrorKind::InvalidInput, why.clone()));
        }
        let input = Payload::to_json(input).map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("the input does not encode: {e}"),
            )
        })?;
        driver::Driver::new(self).run(entry, input)
    }
}

/// What happened in a run, at a virtual time.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Happening {
    /// Virtual time since the run started.
    pub at: Duration,
    /// The process it happened to (1: the top-level workflow, then its children in order).
    pub pid: Pid,
    /// What.
    pub what: What,
}

/// What happened.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum What {
    /// The process started entry point `entry`.
    Started {
        /// The entry point.
        entry: String,
    },
    /// It took a step with this many events (completions, messages, a cancel).
    Stepped {
        /// Events it took.
        events: usize,
    },
    /// It set a timer due at this virtual time since the start.
    Slept {
        /// When it is due.
        until: Duration,
    },
    /// It sent a message (`to`: `Pid::HOST` for the test).
    Sent {
        /// The receiver.
        to: Pid,
        /// The message.
        message: Payload,
    },
    /// It received a message it asked for.
    Received {
        /// The sender (`Pid::HOST` for the test).
        from: Pid,
        /// The message.
        message: Payload,
    },
    /// It called a host function, which answered.
    Called {
        /// The function.
        function: String,
        /// Its input.
        input: Payload,
        /// Its answer.
        output: std::result::Result<Payload, CommandError>,
    },
    /// It logged.
    Logged {
        /// The level, by name.
        level: String,
        /// The message.
        message: String,
    },
    /// It started a child.
    Spawned {
        /// The child's pid.
        child: Pid,
        /// Its entry point.
        entry: String,
    },
    /// It was asked to cancel.
    CancelAsked,
    /// It ended.
    Ended {
        /// Its result, or how it failed.
        result: std::result::Result<Payload, Failure>,
    },
}

/// A finished run: the top-level workflow's result, the virtual time it took, and the history.
#[derive(Clone, Debug)]
pub struct TestRun {
    /// The top-level workflow's result, or how it failed.
    pub outcome: std::result::Result<Payload, Failure>,
    /// Virtual time from its start to its end.
    pub elapsed: Duration,
    /// Everything that happened, in order.
    pub history: Vec<Happening>,
    /// The virtual clock's start.
    pub started: SystemTime,
}

impl TestRun {
    /// The result decoded as `T`; an `Err` says how the workflow failed, or why the result is
    /// not a `T`.
    pub fn result<T: DeserializeOwned>(&self) -> Result<T> {
        match &self.outcome {
            Ok(payload) => payload.decode().map_err(|e| {
                Error::new(
                    ErrorKind::BadOutput,
                    format!("the result is not a {}: {e}", std::any::type_name::<T>()),
                )
            }),
            Err(failure) => Err(Error::new(
                ErrorKind::Failed,
                format!(
                    "the workflow failed ({}): {}",
                    failure.kind, failure.message
                ),
            )),
        }
    }

    /// The messages processes sent the test (`ctx.send(Pid::HOST, ..)`), each decoded as `T`,
    /// with the virtual time since the start it was sent at.
    pub fn sent_to_host<T: DeserializeOwned>(&self) -> Result<Vec<(Duration, T)>> {
        self.history
            .iter()
            .filter_map(|h| match &h.what {
                What::Sent { to, message } if *to == Pid::HOST => Some((h.at, message)),
                _ => None,
            })
            .map(|(at, message)| {
                message.decode().map(|value| (at, value)).map_err(|e| {
                    Error::new(
                        ErrorKind::BadOutput,
                        format!(
                            "a message to the host is not a {}: {e}",
                            std::any::type_name::<T>()
                        ),
                    )
                })
            })
            .collect()
    }

    /// The calls of host function `name`, with the virtual time of each and its input.
    pub fn calls(&self, name: &str) -> Vec<(Duration, Payload)> {
        self.history
            .iter()
            .filter_map(|h| match &h.what {
                What::Called {
                    function, input, ..
                } if function == name => Some((h.at, input.clone())),
                _ => None,
            })
            .collect()
    }

    /// The log lines, with the virtual time of each.
    pub fn logs(&self) -> Vec<(Duration, String)> {
        self.history
            .iter()
            .filter_map(|h| match &h.what {
                What::Logged { message, .. } => Some((h.at, message.clone())),
                _ => None,
            })
            .collect()
    }
}
