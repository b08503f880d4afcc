//! Host functions: timeouts, async functions on the host's runtime or the embedder's, and a
//! shutdown that returns whatever the functions and guests are doing.

use std::time::Duration;

use serde_json::{json, Value};
use std::sync::Arc;

use wfhost::contract::{Event, EventKind};
use wfhost::{Grants, Host, HostBuilder, HostFunction, Limits, Observer, Payload, Pid};
use wfhost_test_programs::PROBE;

const PATIENCE: Duration = Duration::from_secs(120);

fn json(value: Value) -> Payload {
    Payload::to_json(&value).unwrap()
}

fn start(builder: HostBuilder) -> Host {
    let host = builder.build().unwrap();
    host.load_module_with("probe", PROBE, Grants::default().allow_all_functions())
        .unwrap();
    host
}

fn outcomes(host: &Host, function: &str, calls: u32) -> Vec<Value> {
    host.spawn("probe", "calls", json(json!([function, calls])))
        .unwrap()
        .wait_timeout(PATIENCE)
        .expect("finished")
        .unwrap()
        .decode()
        .unwrap()
}

/// Ten calls to a function that never returns, on two threads: each times out (a `timeout` error
/// the workflow sees), the threads are not held by them, and other functions still run.
#[test]
fn hung_blocking_functions_time_out_and_do_not_hold_the_pool() {
    let (_keep, never) = crossbeam_channel::bounded::<()>(0);
    let host = start(
        Host::builder()
            .workers(2)
            .function_threads(2)
            .register(
                "hang",
                HostFunction::typed(move |_: u32| -> Result<u32, String> {
                    let _ = never.recv();
                    Err("unreachable".into())
                })
                .timeout(Some(Duration::from_millis(100))),
            )
            .function("double", |n: u32| Ok::<_, String>(n * 2)),
    );
    let hung = outcomes(&host, "hang", 10);
    assert_eq!(hung.len(), 10);
    for outcome in &hung {
        assert_eq!(outcome["error"], "timeout", "{outcome}");
        assert_eq!(
            outcome["message"],
            "host function 'hang' did not finish within its timeout of 100ms; whatever it was \
             doing may or may not have happened (timeout)"
        );
    }
    assert_eq!(
        outcomes(&host, "double", 3),
        [json!({"ok": 0}), json!({"ok": 2}), json!({"ok": 4})]
    );
    let report = host.shutdown(Duration::from_secs(1));
    assert_eq!(report.closed, 0);
}

/// Says so on a channel when the future holding it is dropped.
struct Dropped(crossbeam_channel::Sender<()>);

impl Drop for Dropped {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

/// An async function runs on the host's runtime; one past its timeout is cancelled (its future
/// dropped) and the workflow gets `timeout`. The workflow's completion does not wait for the drop
/// (a future that blocks its thread must not hold the workflow), so the test waits for it.
#[test]
fn async_functions_run_and_time_out_by_being_dropped() {
    let (flag, dropped) = crossbeam_channel::unbounded();
    let host = start(
        Host::builder()
            .workers(1)
            .function_timeout(Some(Duration::from_millis(200)))
            .function_async("delay", move |millis: u64| {
                let guard = Dropped(flag.clone());
                async move {
                    tokio::time::sleep(Duration::from_millis(millis)).await;
                    drop(guard);
                    Ok::<_, String>(millis)
                }
            }),
    );
    let quick = host
        .spawn("probe", "call", json(json!(["delay", 10])))
        .unwrap()
        .wait_timeout(PATIENCE)
        .unwrap()
        .unwrap();
    assert_eq!(quick.decode::<Value>().unwrap(), json!({"ok": 10}));
    assert_eq!(
        dropped.try_recv(),
        Ok(()),
        "the finished future was dropped"
    );
    let slow = host
        .spawn("probe", "call", json(json!(["delay", 60_000])))
        .unwrap()
        .wait_timeout(PATIENCE)
        .unwrap()
        .unwrap();
    assert_eq!(slow.decode::<Value>().unwrap()["error"], "timeout");
    assert_eq!(
        dropped.recv_timeout(PATIENCE),
        Ok(()),
        "the overrunning future was dropped"
    );
    assert!(dropped.is_empty());
    host.shutdown(Duration::from_secs(1));
}

/// Given the embedder's runtime, async functions run there: an HTTP call in flight holds no thread
/// of the host's.
#[test]
fn async_functions_run_on_the_embedders_runtime_when_given_one() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("embedder-runtime")
        .enable_time()
        .build()
        .unwrap();
    let host = start(
        Host::builder()
            .workers(1)
            .runtime(runtime.handle().clone())
            .function_async("where", |_: Value| async {
                Ok::<_, String>(std::thread::current().name().unwrap_or("").to_string())
            }),
    );
    let outcome = outcomes(&host, "where", 1);
    assert_eq!(outcome, [json!({"ok": "embedder-runtime"})]);
    host.shutdown(Duration::from_secs(1));
}

/// Says which process is about to step with a completion: the step has begun.
struct Completions(crossbeam_channel::Sender<Pid>);

impl Observer for Completions {
    fn event(&self, pid: Pid, event: &Event) {
        if event.kind == EventKind::YieldComplete {
            let _ = self.0.send(pid);
        }
    }
}

/// Shutdown returns within its grace period and a short bound, whatever is running: a guest spinning
/// with a step limit of a minute, and a host function that never returns and has no timeout.
#[test]
fn shutdown_returns_whatever_guests_and_functions_do() {
    let (_keep, never) = crossbeam_channel::bounded::<()>(0);
    let (entered, called) = crossbeam_channel::unbounded();
    let entered_too = entered.clone();
    let (completed, completions) = crossbeam_channel::unbounded();
    let host = start(
        Host::builder()
            .workers(2)
            .observer(Arc::new(Completions(completed)))
            .limits(Limits::default().step_time_limit(Duration::from_secs(60)))
            .register(
                "hang",
                HostFunction::typed(move |_: Value| -> Result<Value, String> {
                    entered.send("hang").unwrap();
                    let _ = never.recv();
                    Err("unreachable".into())
                })
                .timeout(None),
            )
            .function("started", move |_: Value| -> Result<Value, String> {
                entered_too.send("started").unwrap();
                Ok(Value::Null)
            }),
    );
    let spinner = host
        .spawn("probe", "call_then_spin", json(json!("started")))
        .unwrap();
    let caller = host
        .spawn("probe", "strict_call", json(json!("hang")))
        .unwrap();
    // Both are under way: the spinner is about to spin, the hanging call is running.
    let mut seen: Vec<&str> = (0..2)
        .map(|_| called.recv_timeout(PATIENCE).unwrap())
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, ["hang", "started"]);
    // The spinner's step with the completion of `started` has begun: it spins from here on.
    assert_eq!(completions.recv_timeout(PATIENCE), Ok(spinner.pid()));
    let (done, report) = crossbeam_channel::bounded(1);
    let stopping = host.clone();
    std::thread::spawn(move || {
        // Long enough for the caller to see its cancel on a loaded machine; the spinner never
        // ends by itself, so the shutdown always takes all of it.
        let _ = done.send(stopping.shutdown(Duration::from_secs(2)));
    });
    // A hung shutdown would wait for the spinner's step limit (a minute) or for ever.
    let report = report
        .recv_timeout(Duration::from_secs(30))
        .expect("shutdown returned");
    assert_eq!(report.live_at_start, 2);
    let spun = spinner.wait_timeout(PATIENCE).unwrap().unwrap_err();
    assert_eq!(spun.kind(), wfhost::ErrorKind::Terminated, "{spun}");
    assert!(spun.message().contains("the host shut down"), "{spun}");
    // The caller saw the cancel while its call hung, and stopped.
    let called = caller.wait_timeout(PATIENCE).unwrap().unwrap_err();
    assert_eq!(called.kind(), wfhost::ErrorKind::Cancelled, "{called}");
}

/// An async function whose closure panics before it returns a future fails the call with the
/// panic's message, and frees its place: with room for one call in flight, the next still runs.
#[test]
fn an_async_function_that_panics_fails_its_call_and_frees_its_place() {
    let host = start(
        Host::builder()
            .workers(1)
            .function_queue(1)
            .register(
                "boom",
                HostFunction::future(
                    |_, _| -> std::future::Ready<Result<Payload, wfhost::CommandError>> {
                        panic!("boom")
                    },
                ),
            )
            .function("double", |n: u32| Ok::<_, String>(n * 2)),
    );
    // One at a time: the queue has room for one.
    for _ in 0..2 {
        let failed = outcomes(&host, "boom", 1);
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0]["error"], "failed", "{}", failed[0]);
        assert_eq!(
            failed[0]["message"],
            "host function 'boom' panicked: boom (failed)"
        );
    }
    assert_eq!(outcomes(&host, "double", 1), [json!({"ok": 0})]);
    host.shutdown(Duration::from_secs(1));
}

/// At shutdown, async calls still running on the embedder's runtime are aborted (their futures
/// dropped), though the runtime lives on; and the functions themselves are dropped, so one that
/// holds a clone of the host does not keep it alive.
#[test]
fn shutdown_aborts_calls_on_the_embedders_runtime_and_drops_the_functions() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (flag, dropped) = crossbeam_channel::unbounded();
    let (entered, called) = crossbeam_channel::unbounded();
    let keeps_host: Arc<std::sync::OnceLock<Host>> = Arc::default();
    let function_guard = Dropped(flag.clone());
    let held = Arc::clone(&keeps_host);
    let host = start(
        Host::builder()
            .workers(1)
            .runtime(runtime.handle().clone())
            .register(
                "forever",
                HostFunction::future(move |_, _| {
                    let _ = (&function_guard, &held);
                    let guard = Dropped(flag.clone());
                    let entered = entered.clone();
                    async move {
                        let _ = entered.send(());
                        std::future::pending::<()>().await;
                        drop(guard);
                        Ok(Payload::empty())
                    }
                })
                .timeout(None),
            ),
    );
    keeps_host.set(host.clone()).unwrap();
    let run = host
        .spawn("probe", "call", json(json!(["forever", null])))
        .unwrap();
    called.recv_timeout(PATIENCE).unwrap();
    assert!(dropped.is_empty());
    host.shutdown(Duration::from_millis(100));
    // The call's future, then the function (with its guard and the host it held).
    assert_eq!(dropped.recv_timeout(PATIENCE), Ok(()));
    assert_eq!(dropped.recv_timeout(PATIENCE), Ok(()));
    // The workflow saw the shutdown's cancel while its call was in flight.
    let ended = run.wait_timeout(PATIENCE).unwrap().unwrap();
    assert_eq!(
        ended.decode::<Value>().unwrap(),
        json!({"error": null, "message": "cancelled"})
    );
    drop(runtime);
}

/// One process may have only so many calls in flight (`function_calls_per_process`): those past
/// it are refused at once with `limit-reached`, so its neighbours' calls still find room in the
/// host's queue. (Before, one process calling five times filled a queue of five.)
#[test]
fn one_process_cannot_fill_the_queue_of_calls() {
    let (gate, opened) = tokio::sync::watch::channel(false);
    let (started, starts) = crossbeam_channel::unbounded();
    let host = start(
        Host::builder()
            .workers(2)
            .function_queue(5)
            .function_calls_per_process(3)
            .function_async("hold", move |n: u32| {
                let mut opened = opened.clone();
                let _ = started.send(n);
                async move {
                    let _ = opened.wait_for(|open| *open).await;
                    Ok::<_, String>(n)
                }
            })
            .function("double", |n: u32| Ok::<_, String>(n * 2)),
    );
    let holder = host
        .spawn("probe", "calls", json(json!(["hold", 5])))
        .unwrap();
    let mut held: Vec<u32> = (0..3)
        .map(|_| starts.recv_timeout(PATIENCE).unwrap())
        .collect();
    held.sort_unstable();
    assert_eq!(held, [0, 1, 2]);
    // The queue has room for two more calls: the neighbour's.
    assert_eq!(
        outcomes(&host, "double", 2),
        [json!({"ok": 0}), json!({"ok": 2})]
    );
    gate.send(true).unwrap();
    let outcomes: Vec<Value> = holder
        .wait_timeout(PATIENCE)
        .expect("finished")
        .unwrap()
        .decode()
        .unwrap();
    assert_eq!(
        outcomes[..3],
        [json!({"ok": 0}), json!({"ok": 1}), json!({"ok": 2})]
    );
    for refused in &outcomes[3..] {
        assert_eq!(refused["error"], "limit-reached", "{refused}");
        assert_eq!(
            refused["message"],
            "this process has 3 host-function calls in flight, the most one process may have \
             (HostBuilder::function_calls_per_process); await some first (limit-reached)"
        );
    }
    assert!(starts.is_empty(), "a refused call ran");
    host.shutdown(Duration::from_secs(1));
}

/// Typed functions told who calls: a durable workflow's calls carry their idempotency key (the
/// workflow's id and the call's tag), a plain process's none; and a function's own retry policy
/// retries a plain `ctx.call` of it, each attempt a call.
#[test]
fn typed_functions_see_the_key_and_their_retry_policy_applies() {
    let dir = std::env::temp_dir().join(format!("wfhost-functions-keys-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let attempts = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counted = Arc::clone(&attempts);
    let host = start(
        Host::builder()
            .workers(2)
            .store(dir.join("wf.db"), wfhost::SyncMode::Full)
            .register(
                "keyed",
                HostFunction::typed_with_info(|info: wfhost::CallInfo, n: u32| {
                    Ok::<_, String>(format!("{}:{n}", info.idempotency_key.unwrap_or_default()))
                }),
            )
            .register(
                "keyed.async",
                HostFunction::typed_async_with_info(|info: wfhost::CallInfo, n: u32| async move {
                    Ok::<_, String>(format!("{}:{n}", info.name))
                }),
            )
            .register(
                "flaky",
                HostFunction::typed(move |n: u32| {
                    if counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 2 {
                        Err("not yet".to_string())
                    } else {
                        Ok(n)
                    }
                })
                .retry(
                    wfhost::RetryPolicy::default()
                        .initial_interval(Duration::from_millis(5))
                        .max_attempts(3),
                ),
            ),
    );
    let durable = |id: &str, function: &str| -> Value {
        host.start(id, "probe", "call", json(json!([function, 7])))
            .unwrap()
            .wait_timeout(PATIENCE)
            .expect("finished")
            .unwrap()
            .decode()
            .unwrap()
    };
    let keyed = durable("k1", "keyed");
    let text = keyed["ok"].as_str().unwrap();
    assert!(text.starts_with("k1#") && text.ends_with(":7"), "{keyed}");
    assert_eq!(durable("k2", "keyed.async"), json!({"ok": "keyed.async:7"}));
    // Not durable: no key.
    assert_eq!(outcomes(&host, "keyed", 1), [json!({"ok": ":0"})]);
    assert_eq!(durable("k3", "flaky"), json!({"ok": 7}));
    assert_eq!(attempts.load(std::sync::atomic::Ordering::SeqCst), 3);
    host.shutdown(Duration::from_secs(1));
    let _ = std::fs::remove_dir_all(&dir);
}
