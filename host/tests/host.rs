//! The host as a library: loading modules, running many processes, limits, errors.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use wfhost::{ErrorKind, Host, Limits, Observer, Payload, Pid};
use wfhost_test_programs::{COUNTDOWN, HELLO, PROBE};

const PATIENCE: Duration = Duration::from_secs(60);

fn json(value: serde_json::Value) -> Payload {
    Payload::to_json(&value).unwrap()
}

fn host() -> Host {
    let host = Host::builder().workers(2).build().unwrap();
    host.load_module("hello", HELLO).unwrap();
    host.load_module("probe", PROBE).unwrap();
    host.load_module("countdown", COUNTDOWN).unwrap();
    host
}

#[test]
fn a_thousand_concurrent_greetings_all_answer() {
    let host = host();
    let runs: Vec<_> = (0..1_000)
        .map(|i| {
            host.spawn("hello", "greet", json(serde_json::json!(format!("n{i}"))))
                .unwrap()
        })
        .collect();
    for (i, run) in runs.into_iter().enumerate() {
        let result = run.wait_timeout(PATIENCE).expect("finished").unwrap();
        assert_eq!(result.decode::<String>().unwrap(), format!("Hello, n{i}!"));
    }
    assert_eq!(host.live(), 0);
    assert_eq!(host.counters().spawns, 1_000);
}

#[test]
fn many_sleeps_in_flight_at_once() {
    let host = host();
    let runs: Vec<_> = (0..50)
        .map(|_| {
            host.spawn("probe", "sleepy", json(serde_json::json!(100)))
                .unwrap()
        })
        .collect();
    for run in runs {
        let result = run.wait_timeout(PATIENCE).expect("finished").unwrap();
        assert_eq!(result.decode::<u32>().unwrap(), 100);
    }
}

#[test]
fn postcard_input_gets_a_postcard_answer() {
    let host = host();
    let run = host
        .spawn("hello", "greet", Payload::to_postcard("ferris").unwrap())
        .unwrap();
    let result = run.wait_timeout(PATIENCE).unwrap().unwrap();
    assert_eq!(result, Payload::to_postcard("Hello, ferris!").unwrap());
}

#[test]
fn unknown_modules_and_entry_points_are_refused_before_spawning() {
    let host = host();
    let err = host.spawn("nope", "greet", Payload::empty()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnknownModule);
    assert_eq!(
        err.message(),
        "no module is loaded under the name 'nope' (loaded: countdown, hello, probe)"
    );
    let err = host.spawn("hello", "shout", Payload::empty()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnknownEntry);
    assert_eq!(host.counters().spawns, 0);
}

#[test]
fn a_bad_module_is_refused_with_a_kind() {
    let host = host();
    let err = host
        .load_module_bytes("junk", b"\0asm\x01\0\0\0\x99")
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadModule);
    assert!(err.message().starts_with("malformed module:"), "{err}");
    let err = host.load_module("missing", "/no/such.wasm").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io);
}

#[test]
fn identical_modules_share_one_compilation() {
    let host = host();
    let again = host.load_module("hello-again", HELLO).unwrap();
    assert_eq!(again, host.module_info("hello").unwrap());
    let run = host
        .spawn("hello-again", "greet", json(serde_json::json!("twin")))
        .unwrap();
    let result = run.wait_timeout(PATIENCE).unwrap().unwrap();
    assert_eq!(result.decode::<String>().unwrap(), "Hello, twin!");
}

#[test]
fn one_failing_process_does_not_disturb_the_others() {
    let limits = Limits::default()
        .step_time_limit(Duration::from_millis(300))
        .max_memory_bytes(16 << 20);
    let host = Host::builder().workers(2).limits(limits).build().unwrap();
    host.load_module("probe", PROBE).unwrap();
    let spin = host.spawn("probe", "spin", Payload::empty()).unwrap();
    let panic = host
        .spawn("probe", "panic", json(serde_json::json!("no")))
        .unwrap();
    let hog = host
        .spawn("probe", "hog", json(serde_json::json!(64)))
        .unwrap();
    let fine = host
        .spawn("probe", "echo", json(serde_json::json!([1, 2])))
        .unwrap();
    let err = spin.wait_timeout(PATIENCE).unwrap().unwrap_err();
    assert!(
        err.message()
            .contains("ran longer than the step time limit of 300ms"),
        "{err}"
    );
    assert_eq!(err.kind(), ErrorKind::Limit);
    let err = panic.wait_timeout(PATIENCE).unwrap().unwrap_err();
    assert!(
        err.message().contains("(entry point 'panic') panicked: no"),
        "{err}"
    );
    assert_eq!(err.kind(), ErrorKind::Trap);
    let err = hog.wait_timeout(PATIENCE).unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Limit);
    assert!(
        err.message()
            .contains("(entry point 'hog') ran out of memory"),
        "{err}"
    );
    let ok = fine.wait_timeout(PATIENCE).unwrap().unwrap();
    assert_eq!(ok.decode::<Vec<u32>>().unwrap(), [1, 2]);

    // Within the yield limit, and beyond it: the SDK knows the limit (the host tells it at
    // init) and holds what is over for the next step, so an SDK workflow never trips it (a
    // module that does is failed: the hostile suite's `million-yields`).
    for lines in [10_000, 10_001, 25_000] {
        let run = host
            .spawn("probe", "chatter", json(serde_json::json!(lines)))
            .unwrap();
        let result = run.wait_timeout(PATIENCE).unwrap().unwrap();
        assert_eq!(result.decode::<u32>().unwrap(), lines);
    }
}

#[test]
fn shutdown_closes_what_is_still_running() {
    let host = host();
    let run = host
        .spawn(
            "countdown",
            "countdown",
            json(serde_json::json!({ "from": 1_000, "interval_ms": 1_000 })),
        )
        .unwrap();
    // Generous: the shutdown returns as soon as the workflow has ended.
    let report = host.shutdown(Duration::from_secs(10));
    assert_eq!(report.live_at_start, 1);
    // The SDK turns the cancel into a failure of the pending sleep; the workflow returns it, and
    // so ends as cancelled.
    let err = run.wait_timeout(PATIENCE).unwrap().unwrap_err();
    assert_eq!(
        err.message(),
        "entry point 'countdown' stopped: it was cancelled"
    );
    assert_eq!(err.kind(), ErrorKind::Cancelled);
    assert_eq!(report.finished_in_grace, 1);
}

/// Shuts the host down from a worker, right before the step of the process running
/// `call_then_spin` that takes its call's completion (and then spins).
struct ShutdownBeforeSpin {
    host: Mutex<Option<Host>>,
    spinner: Mutex<Option<Pid>>,
    report: Mutex<Option<wfhost::ShutdownReport>>,
}

impl Observer for ShutdownBeforeSpin {
    fn spawned(&self, pid: Pid, _parent: Option<Pid>, entry: &str) {
        if entry == "call_then_spin" {
            *self.spinner.lock().unwrap() = Some(pid);
        }
    }

    fn event(&self, pid: Pid, event: &wfhost::contract::Event) {
        let completion = event.kind == wfhost::contract::EventKind::YieldComplete;
        if !completion || *self.spinner.lock().unwrap() != Some(pid) {
            return;
        }
        let host = self.host.lock().unwrap().take();
        if let Some(host) = host {
            *self.report.lock().unwrap() = Some(host.shutdown(Duration::from_secs(60)));
        }
    }
}

#[test]
fn a_shutdown_called_on_a_worker_still_holds_steps_to_their_limit() {
    let observer = Arc::new(ShutdownBeforeSpin {
        host: Mutex::new(None),
        spinner: Mutex::new(None),
        report: Mutex::new(None),
    });
    let host = Host::builder()
        .workers(2)
        .limits(Limits::default().step_time_limit(Duration::from_millis(200)))
        .observer(Arc::clone(&observer) as Arc<dyn Observer>)
        .function("noop", |_: serde_json::Value| {
            Ok::<_, String>(serde_json::Value::Null)
        })
        .build()
        .unwrap();
    host.load_module_with(
        "probe",
        PROBE,
        wfhost::Grants::default().allow_function("noop"),
    )
    .unwrap();
    *observer.host.lock().unwrap() = Some(host.clone());
    let spinner = host
        .spawn("probe", "call_then_spin", json(serde_json::json!("noop")))
        .unwrap();
    // The shutdown goes on in a thread of its own while the spinner's step runs on the worker
    // that called it. The step limit still stops that step: the wasm runtime (its epoch ticker)
    // stops only once every process is closed, not when the detached shutdown returns (which
    // left the spinner to run until the end of the 60 s grace period).
    let error = spinner
        .wait_timeout(PATIENCE)
        .expect("stopped")
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Limit, "{error}");
    assert!(error.message().contains("step time limit"), "{error}");
    let report = observer.report.lock().unwrap().take().expect("shut down");
    assert!(report.detached);
    assert_eq!(report.live_at_start, 1);
    // The host stays shut: a later shutdown reports the first.
    assert_eq!(host.shutdown(Duration::ZERO), report);
    assert_eq!(
        host.spawn("probe", "echo", json(serde_json::json!(1)))
            .unwrap_err()
            .kind(),
        ErrorKind::ShuttingDown
    );
}

#[test]
fn a_module_that_compiles_too_long_is_refused_and_not_compiled_again() {
    let limits = Limits::default().compile_time_limit(Duration::from_micros(1));
    let host = Host::builder().workers(1).limits(limits).build().unwrap();
    let err = host.load_module("probe", PROBE).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Limit);
    assert!(
        err.message().ends_with(
            "compiling the module took longer than the limit of 1µs \
             (Limits::compile_time_limit, --compile-limit)"
        ),
        "{err}"
    );
    let again = host.load_module("probe", PROBE).unwrap_err();
    assert!(
        again.message().ends_with(
            "compiling this module took longer than the limit of 1µs before \
             (Limits::compile_time_limit, --compile-limit); it is not compiled again"
        ),
        "{again}"
    );
}

#[test]
fn a_module_over_the_size_limit_is_refused_before_it_is_read() {
    let limits = Limits::default().max_module_bytes(1000);
    let host = Host::builder().workers(1).limits(limits).build().unwrap();
    let err = host.load_module("hello", HELLO).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Limit);
    assert!(
        err.message().contains(
            "more than the limit of 1000 bytes (Limits::max_module_bytes, --max-module-size)"
        ),
        "{err}"
    );
}
