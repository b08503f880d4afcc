//! A wasm process on its own, outside a host: what it does when the host has interrupted every
//! guest.

use std::time::Duration;

use wfcontract::{Payload, StepOutput};
use wfhost_scheduler::{Events, FailureKind};

use crate::wasm::bench::Harness;
use crate::wasm::Limits;

/// A workflow whose init succeeds and whose every step spins for ever.
const SPINNER: &str = r#"(module
  (memory (export "memory") 1)
  (data (i32.const 0) "\00")
  (func (export "wfhost_reserve") (param i32) (result i32) i32.const 1024)
  (func (export "wfhost_init") (param i32) (result i64) i64.const 1)
  (func (export "wfhost_step") (param i32) (result i64) (loop $spin (br $spin)) i64.const 0)
  (func (export "wfhost_panic_message") (result i64) i64.const 0)
  (@custom "wfhost-manifest" "wfhost-abi 2\nentry go\n"))"#;

/// Once the host has interrupted every guest to shut down, a step that starts afterwards is not
/// given a fresh step time limit to spin through (it was: this step ran its whole 2 s, and a
/// process stepping again and again held the shutdown as long): it is refused at once.
#[test]
fn a_step_that_starts_after_the_shutdown_interrupt_is_refused() {
    let limits = Limits::default().step_time_limit(Duration::from_secs(2));
    let bytes = wat::parse_str(SPINNER).unwrap();
    let harness = Harness::with_limits(&bytes, None, limits).unwrap();
    let mut process = harness.spawn("go", Payload::empty()).unwrap();
    harness.runtime().interrupt_all();
    let mut events = Vec::new();
    let error = process
        .step(Events::new(&mut events), &mut StepOutput::new())
        .unwrap_err();
    assert_eq!(error.kind(), FailureKind::Terminated, "{error}");
    assert_eq!(
        error.message(),
        "process <1> (entry point 'go') was stopped before its step: the host shut down"
    );
    // Nor does a new process start.
    let Err(error) = harness.spawn("go", Payload::empty()) else {
        panic!("a process started after the interrupt");
    };
    assert_eq!(error.kind(), FailureKind::Terminated, "{error}");
}
