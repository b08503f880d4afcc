//! Hostile guests: each one, run the way a user runs it, fails alone with the error it must
//! produce, and never takes the host down. The WAT guests are in `tests/hostile/`; the Rust ones
//! are entry points of the probe module.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;
use wfhost::{ErrorKind, Host, Limits, Payload};
use wfhost_test_programs::PROBE;

/// How long a case may take before the test calls it a hang. Every limit below is far shorter.
const HANG: Duration = Duration::from_secs(60);

/// `tests/hostile/<name>.wat`, compiled to a `.wasm` file.
fn hostile(name: &str) -> PathBuf {
    let text = wfhost_test_programs::workspace_root()
        .join("tests/hostile")
        .join(format!("{name}.wat"));
    let bytes = wat::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", text.display()));
    let dir = std::env::temp_dir().join(format!("wfhost-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Tests run in parallel threads of one process and may ask for the same module: each writes
    // its own file and renames it into place, so no reader sees one half written.
    let path = dir.join(format!("{name}.wasm"));
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let partial = dir.join(format!(
        "{name}.wasm.{}",
        WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::write(&partial, bytes).unwrap();
    std::fs::rename(&partial, &path).unwrap();
    path
}

struct Outcome {
    code: Option<i32>,
    stderr: String,
}

/// Runs `wfhost run <module> <entry> <flags>`, killing it if it hangs.
fn wfhost_run(module: &Path, entry: &str, flags: &[&str]) -> Outcome {
    let mut child = Command::new(env!("CARGO_BIN_EXE_wfhost"))
        .arg("run")
        .arg(module)
        .arg(entry)
        .args(flags)
        .env_remove("RUST_LOG")
        .env(
            "WFHOST_MODULE_CACHE",
            std::env::temp_dir().join("wfhost-tests-module-cache"),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run wfhost");
    // Read while it runs, so no amount of output blocks it; the pipe closes when it exits.
    let mut pipe = child.stderr.take().expect("piped");
    let (done, read) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut stderr = Vec::new();
        let _ = std::io::Read::read_to_end(&mut pipe, &mut stderr);
        let _ = done.send(stderr);
    });
    // A guard against a hang, not a synchronisation: the normal way out is the child's exit.
    let Ok(stderr) = read.recv_timeout(HANG) else {
        let _ = child.kill();
        panic!("wfhost run {} {entry} {flags:?} hung", module.display());
    };
    let status = child.wait().expect("wait for wfhost");
    Outcome {
        code: status.code(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

struct Case {
    /// A `tests/hostile` WAT file, or `None` for the probe.
    wat: Option<&'static str>,
    entry: &'static str,
    flags: &'static [&'static str],
    code: i32,
    /// Text the one error line must contain.
    expect: &'static str,
}

const fn wat(
    name: &'static str,
    flags: &'static [&'static str],
    code: i32,
    expect: &'static str,
) -> Case {
    Case {
        wat: Some(name),
        entry: "go",
        flags,
        code,
        expect,
    }
}

const fn probe(
    entry: &'static str,
    flags: &'static [&'static str],
    code: i32,
    expect: &'static str,
) -> Case {
    Case {
        wat: None,
        entry,
        flags,
        code,
        expect,
    }
}

const FAST: &[&str] = &["--step-limit", "200ms"];

const CASES: &[Case] = &[
    wat(
        "loop-in-step",
        FAST,
        1,
        "process <1> (entry point 'go') ran longer than the step time limit of 200ms and was \
         stopped (Limits::step_time_limit, --step-limit)",
    ),
    wat(
        "loop-in-step",
        &["--fuel", "1000000"],
        1,
        "process <1> (entry point 'go') used up its fuel of 1000000 and was stopped \
         (Limits::fuel_per_step, --fuel)",
    ),
    wat(
        "loop-in-init",
        FAST,
        1,
        "process <1> (entry point 'go') ran longer than the step time limit of 200ms and was \
         stopped",
    ),
    wat(
        "loop-in-start",
        FAST,
        1,
        "process <1> (entry point 'go') ran longer than the step time limit of 200ms in its \
         start function and was stopped",
    ),
    wat(
        "grow-until-refused",
        &["--max-memory", "2MiB"],
        1,
        "process <1> (entry point 'go') ran out of memory: it asked to grow its memory to \
         2112 KiB, past the limit of 2 MiB (Limits::max_memory_bytes, --max-memory), and then \
         trapped",
    ),
    wat(
        "recursion",
        &[],
        1,
        "process <1> (entry point 'go') overflowed its stack: its wasm frames may use 512 KiB \
         (Limits::max_stack_bytes, --max-stack)",
    ),
    wat(
        "garbage-output",
        &[],
        1,
        "process <1> (entry point 'go') returned a malformed answer",
    ),
    wat(
        "output-out-of-bounds",
        &[],
        1,
        "process <1> (entry point 'go') returned an answer outside its memory (100 bytes at \
         0xffff0000)",
    ),
    wat(
        "reserve-out-of-bounds",
        &[],
        1,
        "process <1> (entry point 'go') reserved an input buffer outside its memory",
    ),
    wat(
        "huge-answer",
        &[],
        1,
        "process <1> (entry point 'go') returned an answer of 2147483647 bytes, more than the \
         limit of 16 MiB (Limits::max_output_bytes, --max-output)",
    ),
    wat(
        "million-yields",
        &[],
        1,
        "process <1> (entry point 'go') yielded 1000000 commands in one step, more than the \
         limit of 10000 (Limits::max_yields_per_step, --max-yields)",
    ),
    wat(
        "unknown-command",
        &[],
        1,
        "process <1> (entry point 'go') returned a malformed answer",
    ),
    wat(
        "huge-tag",
        &[],
        1,
        "process <1> (entry point 'go') returned a malformed answer (a yield's tag is \
         9223372036854775808, past the largest a tag may be (9223372036854775807))",
    ),
    wat(
        "unknown-import",
        &[],
        2,
        "the module imports 'env::launch_missiles', which wfhost does not provide",
    ),
    wat(
        "huge-memory",
        &[],
        2,
        "the module declares an initial memory of 4 GiB, more than the per-process limit of \
         64 MiB (Limits::max_memory_bytes, --max-memory)",
    ),
    wat(
        "huge-table",
        &[],
        2,
        "the module declares a table of 10000000 elements, more than the limit of 100000 \
         (Limits::max_table_elements, --max-table-elements)",
    ),
    probe(
        "spin",
        FAST,
        1,
        "process <1> (entry point 'spin') ran longer than the step time limit of 200ms",
    ),
    probe("recurse", &[], 1, "process <1> (entry point 'recurse')"),
    probe(
        "big_result",
        &["--input", "8"],
        1,
        "process <1> (entry point 'big_result') finished with a result of 8388610 bytes, more \
         than the payload limit of 4194304 (Limits::max_payload_bytes, --max-payload)",
    ),
    probe(
        "strict_call",
        &["--input", "\"payments.charge\""],
        1,
        "this module may not call host function 'payments.charge': the host did not grant it \
         (it grants none) (not-allowed)",
    ),
    probe(
        "bomb",
        &["--max-children", "50"],
        1,
        "process <1> already has its limit of 50 children (running, or finished and not yet \
         joined); join some first (limit-reached)",
    ),
    probe(
        "deluge",
        &["--mailbox-limit", "1000"],
        1,
        "the mailbox of process <2> is full (its message or byte limit); the receiver is not \
         keeping up (mailbox-full)",
    ),
    probe(
        "panic",
        &["--input", "\"the guest gave up\""],
        1,
        "process <1> (entry point 'panic') panicked: the guest gave up",
    ),
    probe(
        "hog",
        &["--input", "64", "--max-memory", "16MiB"],
        1,
        "process <1> (entry point 'hog') ran out of memory",
    ),
];

#[test]
fn every_hostile_guest_fails_alone_with_its_error() {
    let mut failures = Vec::new();
    for case in CASES {
        let module = match case.wat {
            Some(name) => hostile(name),
            None => PathBuf::from(PROBE),
        };
        let outcome = wfhost_run(&module, case.entry, case.flags);
        let name = format!("{} {} {:?}", module.display(), case.entry, case.flags);
        // One line says what went wrong; guest log lines may come before it.
        let errors: Vec<&str> = outcome
            .stderr
            .lines()
            .filter(|line| line.starts_with("error: "))
            .collect();
        // The guest's own panic output is logged under `wfhost::guest`; anything else is ours.
        let host_panicked = outcome
            .stderr
            .lines()
            .filter(|line| !line.contains("wfhost::guest"))
            .any(|line| line.contains("panicked at") || line.contains("RUST_BACKTRACE"));
        if outcome.code != Some(case.code)
            || errors.len() != 1
            || !errors[0].contains(case.expect)
            || host_panicked
        {
            failures.push(format!(
                "{name}: exit {:?} (wanted {}), expected one error line containing\n  {}\nstderr:\n{}",
                outcome.code, case.code, case.expect, outcome.stderr
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn one_hostile_process_among_a_thousand_hurts_none_of_them() {
    // One worker: the worker that runs each hostile step must go on to run everyone else.
    let limits = Limits::default()
        .step_time_limit(Duration::from_millis(200))
        .max_memory_bytes(16 << 20);
    let host = Host::builder()
        .workers(1)
        .limits(limits)
        .max_children(Some(20))
        .build()
        .unwrap();
    host.load_module("probe", PROBE).unwrap();
    host.load_module("garbage", hostile("garbage-output"))
        .unwrap();
    let json = |value: serde_json::Value| Payload::to_json(&value).unwrap();
    let hostile = [
        ("probe", "spin", json!(null), ErrorKind::Limit),
        ("probe", "hog", json!(64), ErrorKind::Limit),
        ("probe", "panic", json!("boom"), ErrorKind::Trap),
        ("probe", "bomb", json!(null), ErrorKind::Failed),
        ("garbage", "go", json!(null), ErrorKind::BadOutput),
    ];
    let mut runs = Vec::new();
    for (i, (module, entry, input, _)) in hostile.iter().enumerate() {
        // Spread among the well-behaved ones.
        for n in 0..200u32 {
            let n = i as u32 * 200 + n;
            runs.push((n, host.spawn("probe", "echo", json(json!(n))).unwrap()));
        }
        let failed = host.spawn(module, entry, json(input.clone())).unwrap();
        runs.push((u32::MAX - i as u32, failed));
    }
    let mut good = 0;
    let mut kinds = Vec::new();
    for (n, run) in runs {
        let result = run.wait_timeout(HANG).expect("every process finishes");
        if n >= u32::MAX - 10 {
            let error = result.unwrap_err();
            // The host names the pid of a process it stopped; a failure the guest reports
            // itself is in its own words.
            if error.kind() != ErrorKind::Failed {
                assert!(
                    error.message().starts_with("process <"),
                    "names the pid: {}",
                    error.message()
                );
            }
            kinds.push(error.kind());
        } else {
            assert_eq!(result.unwrap().decode::<u32>().unwrap(), n);
            good += 1;
        }
    }
    assert_eq!(good, 1000);
    let expected: Vec<ErrorKind> = hostile.iter().map(|h| h.3).collect();
    assert_eq!(kinds, expected);
    // The bomb's children were cancelled with it; nothing is left behind.
    let report = host.shutdown(Duration::from_secs(10));
    assert_eq!(report.closed, 0, "{report:?}");
}
