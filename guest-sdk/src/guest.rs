//! The guest side of the ABI (`wit/README.md`): the bodies of the functions that
//! `entry_points!` exports. Guest memory is single-threaded, so everything lives in thread-locals.

use std::cell::RefCell;
use std::rc::Rc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use wfcontract::abi::{self, InitResponse};
use wfcontract::{Event, EventKind, InitRequest, Status, StepOutput};

use crate::ctx::Ctx;
use crate::entry::{Entry, Running, Started};
use crate::runtime::{self, Ending, ProcessState, Shared};
use std::task::Poll;

struct Process {
    running: Running,
    state: Shared,
    /// The entry point's final status, held until the yields it left have all gone out.
    finished: Option<Status>,
}

thread_local! {
    /// Where the host writes a call's input (`wfhost_reserve`).
    static INPUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// Where the guest writes a call's answer; valid until the next call.
    static OUTPUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static PROCESS: RefCell<Option<Process>> = const { RefCell::new(None) };
    /// The last panic's message, for `wfhost_panic_message`.
    static PANIC: RefCell<String> = const { RefCell::new(String::new()) };
}

/// A guest address as the ABI carries it. Guest pointers are 32-bit on wasm32.
fn address(ptr: *const u8) -> u32 {
    ptr as usize as u32
}

/// `wfhost_reserve`: room for `len` input bytes.
pub fn reserve(len: u32) -> u32 {
    INPUT.with(|input| {
        let mut input = input.borrow_mut();
        input.clear();
        input.resize(len as usize, 0);
        address(input.as_ptr())
    })
}

fn read_input<T: DeserializeOwned>(len: u32) -> Result<T, String> {
    INPUT.with(|input| {
        let input = input.borrow();
        let bytes = input
            .get(..len as usize)
            .ok_or("input longer than the reserved buffer")?;
        postcard::from_bytes(bytes).map_err(|e| e.to_string())
    })
}

fn answer<T: Serialize>(value: &T) -> u64 {
    OUTPUT.with(|output| {
        let mut output = output.borrow_mut();
        let mut buffer = std::mem::take(&mut *output);
        buffer.clear();
        // Only fails on allocation failure; answer with nothing rather than garbage.
        *output = postcard::to_extend(value, buffer).unwrap_or_default();
        abi::pack(address(output.as_ptr()), output.len() as u32)
    })
}

/// Records each panic's message for `wfhost_panic_message`, from which the host builds the
/// process's failure. In a guest that replaces std's printout (which would only repeat it in the
/// log); natively (in tests) the previous hook still prints.
fn install_panic_hook() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info.payload_as_str().unwrap_or("a panic without a message");
            let text = match info.location() {
                Some(at) => format!("{message} (at {}:{})", at.file(), at.line()),
                None => message.to_string(),
            };
            PANIC.with(|panic| *panic.borrow_mut() = text);
            if !cfg!(target_family = "wasm") {
                previous(info);
            }
        }));
    });
}

/// `wfhost_init`: start the entry point named in the request.
pub fn init(len: u32, names: &[&str], lookup: fn(&str) -> Option<Box<dyn Entry>>) -> u64 {
    install_panic_hook();
    let response: InitResponse = (|| {
        let request: InitRequest = read_input(len)
            .map_err(|e| format!("the host sent an unreadable init request: {e}"))?;
        let entry = lookup(&request.entry).ok_or_else(|| {
            format!(
                "unknown entry point '{}' (module exposes: {})",
                request.entry,
                names.join(", ")
            )
        })?;
        let state = ProcessState::new(request.max_yields);
        let ctx = Ctx {
            state: Rc::clone(&state),
            pid: request.pid,
            parent: request.parent,
            entry: request.entry.as_str().into(),
            encoding: request.input.encoding,
        };
        let running = entry.start(ctx, request.input)?;
        PROCESS.with(|process| {
            *process.borrow_mut() = Some(Process {
                running,
                state,
                finished: None,
            })
        });
        Ok(())
    })();
    answer(&response)
}

/// `wfhost_step`: deliver events, run until blocked, report.
pub fn step(len: u32) -> u64 {
    let mut out = StepOutput::new();
    match read_input::<Vec<Event>>(len) {
        Ok(events) => PROCESS.with(|process| match process.borrow_mut().as_mut() {
            Some(process) => step_process(process, events, &mut out),
            None => out.status = Status::Failed("step called before a successful init".into()),
        }),
        Err(e) => out.status = Status::Failed(format!("the host sent unreadable events: {e}")),
    }
    answer(&out)
}

fn step_process(process: &mut Process, events: Vec<Event>, out: &mut StepOutput) {
    match &mut process.running.0 {
        Started::Machine(machine) => machine.step(events, out),
        Started::Async(task) => {
            if events.iter().any(|e| e.kind == EventKind::Cancel) {
                // Code that only checks `is_cancelled` must get a chance to see it.
                task.wake();
            }
            let mut state = process.state.borrow_mut();
            state.deliver(events);
            drop(state);
            let status = match process.finished.take() {
                Some(status) => status,
                None => match task.poll() {
                    Some(Poll::Ready(Ok(result))) => Status::Done(result),
                    Some(Poll::Ready(Err(Ending::Failed(message)))) => Status::Failed(message),
                    Some(Poll::Ready(Err(Ending::Cancelled(message)))) => {
                        Status::Cancelled(message)
                    }
                    Some(Poll::Pending) => runtime::waiting_status(&process.state.borrow()),
                    None => Status::Continue,
                },
            };
            let mut state = process.state.borrow_mut();
            // No more yields than the host takes from one step: the rest go with the next ones,
            // in order, and the workflow's final status waits until they have all gone.
            let take = state.yields.len().min(state.max_yields);
            out.yields.extend(state.yields.drain(..take));
            out.receive = state.wanted_messages();
            out.status = if state.yields.is_empty() {
                status
            } else {
                if status.is_final() {
                    process.finished = Some(status);
                }
                Status::Continue
            };
        }
    }
}

/// `wfhost_panic_message`: the last panic, or `(0, 0)`.
pub fn panic_message() -> u64 {
    PANIC.with(|panic| {
        let panic = panic.borrow();
        if panic.is_empty() {
            0
        } else {
            abi::pack(address(panic.as_ptr()), panic.len() as u32)
        }
    })
}

#[cfg(test)]
mod tests {
    //! The guest side driven natively, the way the host drives it: postcard in, postcard out.
    use std::time::Duration;

    use wfcontract::{Command, Encoding, ErrorKind, Payload, Pid, Tag};

    use super::*;
    use crate::{machine, Ctx, Error, Machine, StartInfo};

    fn call<Req: Serialize, Resp: DeserializeOwned>(
        request: &Req,
        f: impl FnOnce(u32) -> u64,
    ) -> Resp {
        let bytes = postcard::to_allocvec(request).unwrap();
        reserve(bytes.len() as u32);
        INPUT.with(|input| input.borrow_mut().copy_from_slice(&bytes));
        let packed = f(bytes.len() as u32);
        let (_, len) = abi::unpack(packed);
        OUTPUT.with(|output| postcard::from_bytes(&output.borrow()[..len as usize]).unwrap())
    }

    async fn greet(_ctx: Ctx, name: String) -> Result<String, Error> {
        Ok(format!("Hello, {name}!"))
    }

    async fn two_naps(ctx: Ctx, millis: u64) -> Result<u64, Error> {
        let a = ctx.sleep(Duration::from_millis(millis));
        let b = ctx.sleep(Duration::from_millis(millis * 2));
        a.await?;
        b.await?;
        Ok(millis * 3)
    }

    async fn nap_then_clean_up(ctx: Ctx, _: ()) -> Result<String, Error> {
        match ctx.sleep(Duration::from_secs(60)).await {
            Err(Error::Cancelled) => {
                ctx.info("cleaning up");
                ctx.sleep(Duration::from_millis(1)).await?;
                Ok("cleaned".into())
            }
            other => Err(Error::msg(format!("unexpected {other:?}"))),
        }
    }

    async fn echo_once(ctx: Ctx, _: ()) -> Result<u32, Error> {
        let n: u32 = ctx.recv().await?;
        Ok(n + 1)
    }

    async fn fan_out(ctx: Ctx, n: u32) -> Result<u32, Error> {
        let spawns: Vec<_> = (0..n).map(|i| ctx.spawn("greet", &i)).collect();
        let mut pids = 0;
        for spawn in spawns {
            spawn.await?;
            pids += 1;
        }
        Ok(pids)
    }

    async fn impatient_join(ctx: Ctx, child: u64) -> Result<String, Error> {
        use std::future::Future;
        let child = Pid(child);
        {
            // A select of the join and a nap; the test lets the nap win, dropping the join.
            let mut join = std::pin::pin!(ctx.join::<String>(child));
            let mut nap = std::pin::pin!(ctx.sleep(Duration::from_millis(20)));
            std::future::poll_fn(|cx| {
                if nap.as_mut().poll(cx).is_ready() || join.as_mut().poll(cx).is_ready() {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
        }
        ctx.join(child).await
    }

    async fn typed_recv(ctx: Ctx, _: ()) -> Result<String, Error> {
        match ctx.recv::<u32>().await {
            Err(Error::Undecodable(bad)) => Ok(format!("{} sent {:?}", bad.from, bad.data.bytes)),
            other => Err(Error::msg(format!("unexpected {other:?}"))),
        }
    }

    async fn give_up_when_cancelled(ctx: Ctx, _: ()) -> Result<(), Error> {
        ctx.sleep(Duration::from_secs(60)).await
    }

    struct Counter(u32);

    impl Machine for Counter {
        type Input = u32;
        fn start(_: &StartInfo, input: u32) -> Result<Self, String> {
            Ok(Counter(input))
        }
        fn step(&mut self, events: Vec<Event>, out: &mut StepOutput) {
            self.0 += events.len() as u32;
            out.status = if self.0 >= 3 {
                Status::Done(Payload::to_postcard(&self.0).unwrap())
            } else {
                Status::Idle
            };
        }
    }

    fn lookup(name: &str) -> Option<Box<dyn Entry>> {
        use crate::__private::into_entry;
        match name {
            "greet" => Some(into_entry(greet)),
            "two_naps" => Some(into_entry(two_naps)),
            "nap_then_clean_up" => Some(into_entry(nap_then_clean_up)),
            "echo_once" => Some(into_entry(echo_once)),
            "counter" => Some(into_entry(machine::<Counter>())),
            "fan_out" => Some(into_entry(fan_out)),
            "impatient_join" => Some(into_entry(impatient_join)),
            "typed_recv" => Some(into_entry(typed_recv)),
            "give_up_when_cancelled" => Some(into_entry(give_up_when_cancelled)),
            _ => None,
        }
    }

    const NAMES: &[&str] = &[
        "greet",
        "two_naps",
        "nap_then_clean_up",
        "echo_once",
        "counter",
        "fan_out",
        "impatient_join",
        "typed_recv",
        "give_up_when_cancelled",
    ];

    fn start(entry: &str, input: Payload) -> InitResponse {
        let request = InitRequest {
            pid: Pid(7),
            parent: None,
            entry: entry.into(),
            input,
            max_yields: 10,
        };
        call(&request, |len| init(len, NAMES, lookup))
    }

    fn step_with(events: Vec<Event>) -> StepOutput {
        call(&events, step)
    }

    fn done(tag: Tag) -> Event {
        Event::completion(tag, Ok(Payload::empty()))
    }

    #[test]
    fn greet_answers_json_with_json() {
        start("greet", Payload::to_json("world").unwrap()).unwrap();
        let out = step_with(vec![]);
        assert_eq!(
            out.status,
            Status::Done(Payload::to_json("Hello, world!").unwrap())
        );
        assert!(out.yields.is_empty());
    }

    #[test]
    fn two_sleeps_are_in_flight_at_once() {
        start("two_naps", Payload::to_postcard(&10u64).unwrap()).unwrap();
        let out = step_with(vec![]);
        assert_eq!(out.status, Status::Wait);
        let sleeps: Vec<_> = out
            .yields
            .iter()
            .map(|y| (y.tag, y.command.clone()))
            .collect();
        assert_eq!(
            sleeps,
            [
                (Tag(1), Command::Sleep(Duration::from_millis(10))),
                (Tag(2), Command::Sleep(Duration::from_millis(20)))
            ]
        );
        // The second finishes first: still waiting for the first.
        let out = step_with(vec![done(Tag(2))]);
        assert_eq!((out.status, out.yields.len()), (Status::Wait, 0));
        let out = step_with(vec![done(Tag(1))]);
        assert_eq!(
            out.status,
            Status::Done(Payload::to_postcard(&30u64).unwrap())
        );
    }

    #[test]
    fn cancel_fails_pending_awaits_and_clean_up_still_runs() {
        start("nap_then_clean_up", Payload::empty()).unwrap();
        assert_eq!(step_with(vec![]).yields.len(), 1);
        let out = step_with(vec![Event::cancel()]);
        assert_eq!(out.status, Status::Wait);
        assert!(matches!(out.yields[0].command, Command::Log(_)));
        assert_eq!(
            out.yields[1].command,
            Command::Sleep(Duration::from_millis(1))
        );
        // The first sleep's late completion is ignored; the clean-up sleep finishes the run.
        let out = step_with(vec![done(Tag(1)), done(out.yields[1].tag)]);
        assert_eq!(
            out.status,
            Status::Done(Payload::to_postcard("cleaned").unwrap())
        );
    }

    #[test]
    fn a_completion_in_the_same_step_as_the_cancel_does_not_undo_it() {
        start("nap_then_clean_up", Payload::empty()).unwrap();
        step_with(vec![]);
        // The host drains cancels before completions: both arrive in one step.
        let out = step_with(vec![Event::cancel(), done(Tag(1))]);
        assert!(matches!(out.yields[0].command, Command::Log(_)));
        let out = step_with(vec![done(out.yields[1].tag)]);
        assert_eq!(
            out.status,
            Status::Done(Payload::to_postcard("cleaned").unwrap())
        );
    }

    #[test]
    fn a_cancel_before_the_first_await_fails_that_await() {
        start("nap_then_clean_up", Payload::empty()).unwrap();
        // The cancel arrives with the very first step, before the workflow awaited anything.
        let out = step_with(vec![Event::cancel()]);
        assert_eq!(
            out.yields[0].command,
            Command::Sleep(Duration::from_secs(60))
        );
        assert!(matches!(out.yields[1].command, Command::Log(_)));
        let cleanup = out.yields[2].tag;
        let out = step_with(vec![done(cleanup)]);
        assert_eq!(
            out.status,
            Status::Done(Payload::to_postcard("cleaned").unwrap())
        );
    }

    #[test]
    fn waiting_only_for_a_message_is_idle() {
        start("echo_once", Payload::empty()).unwrap();
        let out = step_with(vec![]);
        // One receive waits: it asks for one message, no more.
        assert_eq!((out.status, out.receive), (Status::Idle, 1));
        let message = Event::message(Pid(3), Payload::to_postcard(&41u32).unwrap());
        let out = step_with(vec![message]);
        assert_eq!(
            out.status,
            Status::Done(Payload::to_postcard(&42u32).unwrap())
        );
    }

    #[test]
    fn a_workflow_not_receiving_asks_for_no_messages() {
        start("two_naps", Payload::to_postcard(&10u64).unwrap()).unwrap();
        let out = step_with(vec![]);
        assert_eq!((out.status, out.receive), (Status::Wait, 0));
    }

    /// More yields than the host takes from one step go out over several, in order; the result
    /// waits until they have all gone.
    #[test]
    fn yields_beyond_the_hosts_limit_wait_for_the_next_step() {
        start("fan_out", Payload::to_postcard(&25u32).unwrap()).unwrap();
        let mut tags = Vec::new();
        for expected in [10, 10, 5] {
            let out = step_with(vec![]);
            assert_eq!(out.yields.len(), expected);
            let status = if expected == 5 {
                Status::Wait
            } else {
                Status::Continue
            };
            assert_eq!(out.status, status);
            tags.extend(out.yields.iter().map(|y| y.tag.0));
        }
        assert_eq!(tags, (1..=25).collect::<Vec<_>>());
        let pid = |n: u64| Event::completion(Tag(n), Ok(Payload::to_postcard(&Pid(n)).unwrap()));
        let out = step_with((1..=25).map(pid).collect());
        assert_eq!(
            out.status,
            Status::Done(Payload::to_postcard(&25u32).unwrap())
        );
    }

    /// A join dropped before its child finished (the losing side of a select) does not lose the
    /// child's result: the next join of the same child gets it, without asking the host again.
    #[test]
    fn an_abandoned_join_keeps_the_result_for_the_next_one() {
        start("impatient_join", Payload::to_postcard(&77u64).unwrap()).unwrap();
        let out = step_with(vec![]);
        assert_eq!(
            out.yields.iter().map(|y| &y.command).collect::<Vec<_>>(),
            [
                &Command::Join(Pid(77)),
                &Command::Sleep(Duration::from_millis(20))
            ]
        );
        let (join, nap) = (out.yields[0].tag, out.yields[1].tag);
        // The nap ends first: the join future is dropped and the workflow joins again, which
        // asks the host for nothing new (the first join is still in flight).
        let out = step_with(vec![done(nap)]);
        assert!(out.yields.is_empty(), "{:?}", out.yields);
        assert_eq!(out.status, Status::Wait);
        let result = Payload::to_postcard("child result").unwrap();
        let out = step_with(vec![Event::completion(join, Ok(result.clone()))]);
        assert_eq!(out.status, Status::Done(result));
    }

    #[test]
    fn a_message_of_the_wrong_type_is_an_error_the_workflow_can_match() {
        start("typed_recv", Payload::empty()).unwrap();
        step_with(vec![]);
        let out = step_with(vec![Event::message(Pid(5), Payload::opaque(vec![0xff]))]);
        assert_eq!(
            out.status,
            Status::Done(Payload::to_postcard("<5> sent [255]").unwrap())
        );
    }

    #[test]
    fn a_workflow_that_stops_because_it_was_cancelled_ends_as_cancelled() {
        start("give_up_when_cancelled", Payload::empty()).unwrap();
        step_with(vec![]);
        let out = step_with(vec![Event::cancel()]);
        assert_eq!(
            out.status,
            Status::Cancelled(
                "entry point 'give_up_when_cancelled' stopped: it was cancelled".into()
            )
        );
    }

    #[test]
    fn a_command_error_reaches_the_workflow_as_a_failure() {
        start("two_naps", Payload::to_postcard(&1u64).unwrap()).unwrap();
        step_with(vec![]);
        let error = wfcontract::CommandError::new(ErrorKind::UnknownCommand, "no timer here");
        let out = step_with(vec![Event::completion(Tag(1), Err(error))]);
        assert_eq!(
            out.status,
            Status::Failed("entry point 'two_naps' failed: no timer here (unknown-command)".into())
        );
    }

    #[test]
    fn unknown_entry_and_bad_input_fail_init_with_a_reason() {
        assert_eq!(
            start("shout", Payload::empty()),
            Err("unknown entry point 'shout' (module exposes: greet, two_naps, nap_then_clean_up, echo_once, counter, fan_out, impatient_join, typed_recv, give_up_when_cancelled)".into())
        );
        let err = start("greet", Payload::to_json(&12).unwrap()).unwrap_err();
        assert!(
            err.starts_with("entry point 'greet' cannot use its input: invalid JSON payload"),
            "{err}"
        );
    }

    async fn patient(ctx: Ctx, rounds: u32) -> Result<u32, Error> {
        for _ in 0..rounds {
            if ctx
                .recv_timeout::<u32>(Duration::from_millis(1))
                .await?
                .is_some()
            {
                return Err(Error::msg("no message was sent"));
            }
        }
        Ok(rounds)
    }

    fn patient_ctx(state: &Shared) -> Ctx {
        Ctx {
            state: Rc::clone(state),
            pid: Pid(1),
            parent: None,
            entry: "patient".into(),
            encoding: Encoding::Postcard,
        }
    }

    #[test]
    fn timed_out_receives_leave_nothing_behind() {
        let state = ProcessState::new(10);
        let ctx = patient_ctx(&state);
        let mut task = crate::runtime::Task::new(Box::pin(async move {
            patient(ctx, 3)
                .await
                .map(|_| Payload::empty())
                .map_err(|e| Ending::Failed(e.to_string()))
        }));
        for _ in 0..3 {
            assert!(matches!(task.poll(), Some(std::task::Poll::Pending)));
            let timer = state.borrow().yields.back().unwrap().tag;
            state.borrow_mut().yields.clear();
            state.borrow_mut().deliver(vec![done(timer)]);
        }
        assert!(matches!(task.poll(), Some(std::task::Poll::Ready(Ok(_)))));
        assert!(state.borrow().recv_wakers_is_empty());
    }

    #[test]
    fn a_message_that_beats_the_timeout_makes_the_timer_forgotten() {
        let state = ProcessState::new(10);
        let ctx = patient_ctx(&state);
        let mut task = crate::runtime::Task::new(Box::pin(async move {
            let got = ctx.recv_timeout::<u32>(Duration::from_secs(3600)).await;
            Ok(Payload::to_postcard(&got.map_err(|e| Ending::Failed(e.to_string()))?).unwrap())
        }));
        assert!(matches!(task.poll(), Some(std::task::Poll::Pending)));
        let timer = std::mem::take(&mut state.borrow_mut().yields)[0].tag;
        let message = Event::message(Pid(2), Payload::to_postcard(&5u32).unwrap());
        state.borrow_mut().deliver(vec![message]);
        assert!(matches!(task.poll(), Some(std::task::Poll::Ready(Ok(_)))));
        let yields = std::mem::take(&mut state.borrow_mut().yields);
        assert_eq!(yields.len(), 1);
        assert_eq!(yields[0].command, Command::Forget(timer));
    }

    #[test]
    fn a_machine_sees_raw_events() {
        start("counter", Payload::to_postcard(&1u32).unwrap()).unwrap();
        assert_eq!(step_with(vec![]).status, Status::Idle);
        let out = step_with(vec![Event::cancel(), Event::cancel()]);
        assert_eq!(
            out.status,
            Status::Done(Payload::to_postcard(&3u32).unwrap())
        );
        assert_eq!(Encoding::Postcard, Payload::empty().encoding);
    }
}
