//! What the durable tests share: a host on a store, with order host functions that log each call.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{json, Value};
use wfhost::contract::{CommandError, ErrorKind};
use wfhost::{Grants, Host, HostBuilder, Payload, SyncMode};
use wfhost_test_programs::PROBE;

pub const PATIENCE: Duration = Duration::from_secs(120);

pub fn json(value: Value) -> Payload {
    Payload::to_json(&value).unwrap()
}

/// A fresh directory for one test.
pub fn tempdir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("wfhost-durable-host-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The compiled-module cache the tests share, so each host does not compile the probe again.
pub fn module_cache() -> PathBuf {
    std::env::temp_dir().join("wfhost-tests-module-cache")
}

/// A host on `store` with the probe loaded as "probe", allowed every host function.
pub fn host_on(builder: HostBuilder, store: &Path) -> Host {
    let host = builder
        .workers(2)
        .module_cache(module_cache())
        .store(store, SyncMode::Full)
        .build()
        .unwrap();
    host.load_module_with("probe", PROBE, Grants::default().allow_all_functions())
        .unwrap();
    host
}

/// Registers `reserve`, `charge`, `ship` and `undo`, each of which appends one line to `log`
/// ("phase key name input") before it answers: `ship` fails for every order `n` with `n % 5 == 4`.
pub fn order_functions(builder: HostBuilder, log: &Path, phase: &str) -> HostBuilder {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let file = Arc::new(Mutex::new(file));
    let mut builder = builder;
    for name in ["reserve", "charge", "ship", "undo"] {
        let (file, phase) = (Arc::clone(&file), phase.to_string());
        builder = builder.function_raw(name, move |info, input| {
            let key = info.idempotency_key.clone().unwrap_or_default();
            let text = String::from_utf8_lossy(&input.bytes).into_owned();
            // One write per line: a kill leaves whole lines.
            let line = format!("{phase} {key} {name} {text}\n");
            file.lock().write_all(line.as_bytes()).unwrap();
            let answer = match name {
                "undo" => json!(format!("undone {}", text.trim_matches('"'))),
                "ship" if text.parse::<u32>().is_ok_and(|n| n % 5 == 4) => {
                    return Err(CommandError::new(ErrorKind::Failed, "no courier"));
                }
                _ => json!(format!("{name}-{text}")),
            };
            Ok(json(answer))
        });
    }
    builder
}

/// The result `order_saga` gives for order `n`.
pub fn saga_result(n: u32) -> Value {
    if n % 5 == 4 {
        json!({
            "order": n,
            "failed": "no courier (failed)",
            "undone": [format!("undone charge-{n}"), format!("undone reserve-{n}")],
        })
    } else {
        json!({ "order": n, "receipts": [format!("reserve-{n}"), format!("charge-{n}"), format!("ship-{n}")] })
    }
}

/// Host calls `order_saga` makes for order `n`.
pub fn saga_calls(n: u32) -> usize {
    if n % 5 == 4 {
        5
    } else {
        3
    }
}
