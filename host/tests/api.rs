//! The embedding API: a host shared between threads, per-spawn options, typed results, the module
//! cache on disk, and what the library does not expose or depend on.

use std::time::Duration;

use serde_json::{json, Value};
use wfhost::{ErrorKind, Grants, Host, Limits, Payload, SpawnOptions};
use wfhost_test_programs::{HELLO, PROBE};

const PATIENCE: Duration = Duration::from_secs(120);

fn host() -> Host {
    let host = Host::builder().workers(2).build().unwrap();
    host.load_module("probe", PROBE).unwrap();
    host.load_module("hello", HELLO).unwrap();
    host
}

fn json(value: Value) -> Payload {
    Payload::to_json(&value).unwrap()
}

/// `Host` is a cheap handle: clones on many threads drive one host; shutdown from any clone
/// stops it for all, and a second shutdown reports the first's figures.
#[test]
fn clones_of_a_host_share_it_across_threads() {
    fn shareable<T: Clone + Send + Sync>() {}
    shareable::<Host>();
    let host = host();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let host = host.clone();
            std::thread::spawn(move || {
                (0..25)
                    .map(|i| {
                        let name = format!("t{t}-{i}");
                        let run = host
                            .spawn("hello", "greet", json(json!(name)))
                            .unwrap()
                            .decoded::<String>();
                        assert_eq!(run.wait().unwrap(), format!("Hello, {name}!"));
                    })
                    .count()
            })
        })
        .collect();
    let greeted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(greeted, 100);
    assert_eq!(host.counters().spawns, 100);
    let waiting = host.spawn("probe", "stubborn", json(json!(null))).unwrap();
    let first = host.clone().shutdown(Duration::from_millis(50));
    assert_eq!((first.live_at_start, first.closed), (1, 1));
    assert_eq!(host.shutdown(Duration::from_secs(5)), first);
    let error = waiting.wait().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Terminated);
    let refused = host
        .spawn("hello", "greet", json(json!("late")))
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::ShuttingDown);
}

#[test]
fn a_typed_run_decodes_its_result_or_says_it_could_not() {
    let host = host();
    let greeting = host
        .spawn("hello", "greet", json(json!("typed")))
        .unwrap()
        .decoded::<String>();
    assert_eq!(greeting.wait().unwrap(), "Hello, typed!");
    let number = host
        .spawn("hello", "greet", json(json!("typed")))
        .unwrap()
        .decoded::<u64>();
    let error = number.wait().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::BadOutput);
    assert!(
        error
            .message()
            .starts_with("the result does not decode as the type asked for"),
        "{error}"
    );
}

/// Options for one spawn: its grants, its limits (inherited by its children), its timeout.
#[test]
fn spawn_options_set_grants_limits_and_a_timeout_for_one_process() {
    let host = host();
    // No commands at all: its sleep is refused, and so it fails.
    let denied = host
        .spawn_with(
            "probe",
            "sleepy",
            json(json!(1)),
            &SpawnOptions::new().grants(Grants::none()),
        )
        .unwrap()
        .wait_timeout(PATIENCE)
        .unwrap()
        .unwrap_err();
    assert!(
        denied
            .message()
            .contains("this module may not use the 'sleep' command"),
        "{denied}"
    );
    // The same entry point with the module's grants is fine.
    host.spawn("probe", "sleepy", json(json!(1)))
        .unwrap()
        .wait_timeout(PATIENCE)
        .unwrap()
        .unwrap();

    // Less memory than the host's: 32 MiB do not fit in 16, for it and for its children.
    let small = SpawnOptions::new().limits(Limits::default().max_memory_bytes(16 << 20));
    let hog = host
        .spawn_with("probe", "hog", json(json!(32)), &small)
        .unwrap()
        .wait_timeout(PATIENCE)
        .unwrap()
        .unwrap_err();
    assert_eq!(hog.kind(), ErrorKind::Limit, "{hog}");
    let child = host
        .spawn_with("probe", "supervise", json(json!([null, "hog", 32])), &small)
        .unwrap()
        .wait_timeout(PATIENCE)
        .unwrap()
        .unwrap()
        .decode::<Value>()
        .unwrap();
    assert_eq!(child["error"], "child-failed", "{child}");
    assert!(
        child["message"]
            .as_str()
            .unwrap()
            .contains("ran out of memory"),
        "{child}"
    );
    // Without the option, 32 MiB fit.
    let fine = host
        .spawn("probe", "hog", json(json!(32)))
        .unwrap()
        .wait_timeout(PATIENCE)
        .unwrap()
        .unwrap();
    assert_eq!(fine.decode::<usize>().unwrap(), 32);

    // More than the engine allows is refused before anything runs.
    let big = SpawnOptions::new().limits(Limits::default().max_memory_bytes(1 << 30));
    let refused = host
        .spawn_with("probe", "echo", json(json!(1)), &big)
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Config);
    assert_eq!(
        refused.message(),
        "a process cannot be given more memory (max_memory_bytes) than the host's"
    );

    // A timeout ends it, however it waits.
    let timed = host
        .spawn_with(
            "probe",
            "stubborn",
            json(json!(null)),
            &SpawnOptions::new().timeout(Duration::from_millis(100)),
        )
        .unwrap()
        .wait_timeout(PATIENCE)
        .unwrap()
        .unwrap_err();
    assert_eq!(timed.kind(), ErrorKind::Timeout);
    assert_eq!(
        timed.message(),
        "timed out: it ran longer than its timeout of 100ms"
    );
}

/// Compiled modules kept on disk are used by the next host (the file is not written again), only
/// this user may read or write them, a damaged file (by one byte) is replaced by a fresh compile,
/// and a directory others may write to is not used.
#[cfg(unix)]
/// Grants narrowed for one process bound its descendants too: it cannot get its module's grants
/// back by spawning its own module (or another), however deep. Without narrowed grants, a child
/// runs with its module's.
#[test]
fn narrowed_grants_bound_the_children_of_the_process() {
    let host = Host::builder()
        .workers(2)
        .function("double", |n: u32| Ok::<_, String>(n * 2))
        .build()
        .unwrap();
    host.load_module_with("probe", PROBE, Grants::default().allow_all_functions())
        .unwrap();
    host.load_module_with("other", PROBE, Grants::default().allow_function("double"))
        .unwrap();
    let outcome = |options: &SpawnOptions, input: Value| -> Value {
        host.spawn_with("probe", "supervise", json(input), options)
            .unwrap()
            .wait_timeout(PATIENCE)
            .unwrap()
            .unwrap()
            .decode()
            .unwrap()
    };
    let call = json!(["double", 21]);
    let narrowed = SpawnOptions::new().grants(Grants::default());
    let refused = "this module may not call host function 'double': the host did not grant it \
                   (it grants none) (not-allowed)";
    // Its own module, and another module, as a child.
    for module in [Value::Null, json!("other")] {
        let child = outcome(&narrowed, json!([module, "call", call]));
        assert_eq!(child["ok"]["error"], "not-allowed", "{child}");
        assert_eq!(child["ok"]["message"], refused, "{child}");
    }
    // A grandchild.
    let grandchild = outcome(&narrowed, json!([null, "supervise", [null, "call", call]]));
    assert_eq!(
        grandchild["ok"]["ok"]["error"], "not-allowed",
        "{grandchild}"
    );
    // Not narrowed: the child has its module's grants, whatever its parent's module grants.
    let child = outcome(&SpawnOptions::new(), json!(["other", "call", call]));
    assert_eq!(child["ok"], json!({"ok": 42}), "{child}");
    host.shutdown(Duration::from_secs(1));
}

#[test]
fn the_module_cache_keeps_compiled_modules_between_hosts() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = std::env::temp_dir().join(format!("wfhost-module-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let files = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(&dir)
            .map(|entries| entries.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default()
    };
    let load = || {
        let host = Host::builder()
            .workers(1)
            .module_cache(&dir)
            .build()
            .unwrap();
        host.load_module("hello", HELLO).unwrap();
        let greeting = host
            .spawn("hello", "greet", json(json!("cache")))
            .unwrap()
            .decoded::<String>()
            .wait()
            .unwrap();
        assert_eq!(greeting, "Hello, cache!");
        host.shutdown(Duration::from_secs(1));
    };
    load();
    let cached = files();
    assert_eq!(cached.len(), 1, "{cached:?}");
    assert_eq!(cached[0].extension().unwrap(), "cwasm");
    let mode = |path: &std::path::Path| std::fs::metadata(path).unwrap().mode() & 0o777;
    assert_eq!((mode(&dir), mode(&cached[0])), (0o700, 0o600));
    // A file is written to a new name and renamed into place: a new inode means a new write.
    let inode = || std::fs::metadata(&cached[0]).unwrap().ino();
    let written = inode();
    load();
    assert_eq!(inode(), written, "the second host compiled again");
    // One byte changed, the length kept: the digest refuses it, and a fresh compile replaces it.
    let mut bytes = std::fs::read(&cached[0]).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&cached[0], &bytes).unwrap();
    load();
    assert_ne!(inode(), written, "the damaged file was used");
    assert_ne!(std::fs::read(&cached[0]).unwrap(), bytes);
    // Not a compiled module at all: the same.
    std::fs::write(&cached[0], b"not a compiled module").unwrap();
    load();
    assert!(std::fs::metadata(&cached[0]).unwrap().len() > 1000);
    // Writable by others: not trusted, not used, nothing written.
    std::fs::remove_file(&cached[0]).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    load();
    assert!(files().is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn loads_of_the_same_module_at_once_compile_it_once() {
    let host = Host::builder().workers(1).build().unwrap();
    let bytes = std::fs::read(HELLO).unwrap();
    std::thread::scope(|scope| {
        for n in 0..8 {
            let (host, bytes) = (&host, &bytes);
            scope.spawn(move || {
                host.load_module_bytes(&format!("hello-{n}"), bytes)
                    .unwrap();
            });
        }
    });
    assert_eq!(host.residency().compiles, 1);
    assert_eq!(host.residency().modules, 1);
    host.shutdown(Duration::from_secs(1));
}

/// The library is for embedding: the command line's dependencies stay in the CLI's crate.
#[test]
fn the_library_does_not_depend_on_the_command_lines_crates() {
    let manifest = include_str!("../Cargo.toml");
    let dependencies = manifest.split("[dev-dependencies]").next().unwrap();
    // (serde_json is the library's too: it compares JSON inputs of idempotent starts.)
    for cli_only in ["clap", "ctrlc", "tracing-subscriber", "anyhow"] {
        assert!(
            !dependencies.contains(&format!("\n{cli_only}")),
            "wfhost depends on {cli_only}"
        );
    }
}
