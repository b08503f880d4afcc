//! What one process cannot do to another on the real host, through real guests: flood it out of
//! memory, hold the workers, make a waiting neighbour spin; and that the host gives back what it
//! no longer needs. Exact counts and results; no sleeps as synchronisation.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{json, Value};
use wfhost::{ErrorKind, Hibernation, Host, Limits, Observer, Payload, Pid, Residency};
use wfhost_test_programs::{HELLO, PROBE};

const PATIENCE: Duration = Duration::from_secs(120);

fn json(value: Value) -> Payload {
    Payload::to_json(&value).unwrap()
}

/// Waits until the host's residency satisfies `done`: a condition, not a sleep.
fn until(host: &Host, what: &str, done: impl Fn(&Residency) -> bool) {
    let deadline = std::time::Instant::now() + PATIENCE;
    while !done(&host.residency()) {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}: {:?}",
            host.residency()
        );
        std::thread::yield_now();
    }
}

/// Records the order in which processes finish, and tells a channel about each.
#[derive(Default)]
struct Finishes {
    order: Mutex<Vec<(Pid, bool)>>,
    first: Mutex<Option<crossbeam_channel::Sender<Pid>>>,
}

impl Observer for Finishes {
    fn finished(&self, pid: Pid, result: &wfhost::Result<Payload>) {
        self.order.lock().push((pid, result.is_ok()));
        if let Some(sender) = self.first.lock().take() {
            let _ = sender.send(pid);
        }
    }
}

const MIB: usize = 1 << 20;

/// A flooder sends 3 MiB messages as fast as it can to a victim that is inside a long wait. The
/// messages stay in the victim's bounded mailbox (32 MiB here): the flooder is refused with
/// `mailbox-full` after exactly ten, and the victim, whose memory could not hold them all, finishes
/// with its exact result, having received what it asked for when it asked.
fn a_flood_waits_in_the_mailbox(wait_millis: u64) {
    let finishes = Arc::new(Finishes::default());
    let (flooder_done, flooded) = crossbeam_channel::bounded(1);
    *finishes.first.lock() = Some(flooder_done);
    let gate = Mutex::new(flooded);
    let host = Host::builder()
        .workers(2)
        .mailbox_bytes(Some(32 * MIB))
        .observer(Arc::clone(&finishes) as Arc<dyn Observer>)
        // The victim's long host call ends only once the flooder has been refused and finished.
        .function("gate", move |_: Value| -> Result<Value, String> {
            let flooder = gate
                .lock()
                .recv_timeout(PATIENCE)
                .map_err(|e| e.to_string())?;
            Ok(json!(flooder.0))
        })
        .build()
        .unwrap();
    host.load_module_with(
        "probe",
        PROBE,
        wfhost::Grants::default().allow_function("gate"),
    )
    .unwrap();
    let victim = host
        .spawn("probe", "flood_victim", json(json!([3 * MIB, wait_millis])))
        .unwrap();
    let result: Value = victim
        .wait_timeout(PATIENCE)
        .expect("finished")
        .unwrap()
        .decode()
        .unwrap();
    assert_eq!(result["flood"]["sent"], 10, "{result}");
    assert_eq!(
        result["flood"]["refused"]["error"], "mailbox-full",
        "{result}"
    );
    assert_eq!(result["received"], 10, "{result}");
    assert_eq!(result["bytes"], 30 * MIB, "{result}");
    host.shutdown(Duration::from_secs(1));
}

#[test]
fn a_flood_waits_in_the_mailbox_of_a_victim_inside_a_host_call() {
    a_flood_waits_in_the_mailbox(0);
}

#[test]
fn a_flood_waits_in_the_mailbox_of_a_victim_inside_a_sleep() {
    a_flood_waits_in_the_mailbox(300);
}

/// As many processes burning 250 ms per step (each under the 300 ms step limit, each asking to run
/// again) as there are workers, among a thousand ordinary processes: the thousand all finish, with
/// their exact results, before either hog is stopped at its CPU time limit.
#[test]
fn hogs_cannot_keep_ordinary_processes_from_finishing() {
    let finishes = Arc::new(Finishes::default());
    let host = Host::builder()
        .workers(2)
        .limits(
            Limits::default()
                .step_time_limit(Duration::from_millis(300))
                .max_cpu_time(Some(Duration::from_secs(5))),
        )
        .observer(Arc::clone(&finishes) as Arc<dyn Observer>)
        .build()
        .unwrap();
    host.load_module("probe", PROBE).unwrap();
    let hogs: Vec<_> = (0..2)
        .map(|_| host.spawn("probe", "hog_loop", json(json!(250))).unwrap())
        .collect();
    let ordinary: Vec<_> = (0..1_000u32)
        .map(|i| {
            host.spawn("probe", "sleepy", json(json!(i % 4 + 1)))
                .unwrap()
        })
        .collect();
    for (i, run) in ordinary.iter().enumerate() {
        let result = run.wait_timeout(PATIENCE).expect("finished").unwrap();
        assert_eq!(result.decode::<u32>().unwrap(), i as u32 % 4 + 1);
    }
    let hog_pids: Vec<Pid> = hogs.iter().map(|run| run.pid()).collect();
    for hog in hogs {
        let error = hog.wait_timeout(PATIENCE).expect("stopped").unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Limit, "{error}");
        assert!(
            error
                .message()
                .contains("used up its CPU time limit of 5s over its life"),
            "{error}"
        );
    }
    let order = finishes.order.lock().clone();
    let first_hog = order
        .iter()
        .position(|(pid, _)| hog_pids.contains(pid))
        .unwrap();
    assert_eq!(first_hog, 1_000, "a hog finished before the others");
    host.shutdown(Duration::from_secs(1));
}

/// The case found with the CLI: two hogs and two hundred children that each sleep 100 ms, on two
/// workers. The children all finish while the hogs run.
#[test]
fn children_sleeping_beside_hogs_finish() {
    let host = Host::builder()
        .workers(2)
        .limits(Limits::default().step_time_limit(Duration::from_millis(300)))
        .build()
        .unwrap();
    host.load_module("probe", PROBE).unwrap();
    let run = host.spawn("probe", "crowd", json(json!([2, 200]))).unwrap();
    let result = run.wait_timeout(PATIENCE).expect("finished").unwrap();
    assert_eq!(result.decode::<u32>().unwrap(), 200);
    host.shutdown(Duration::from_secs(1));
}

/// A module whose processes cannot hibernate (it has a start function): each step sleeps an hour.
const STICKY: &str = r#"(module
  (memory (export "memory") 1)
  (data (i32.const 0) "\00")
  (data (i32.const 16) "\01\01\01\00\90\1c\00\00")
  (func $start)
  (start $start)
  (func (export "wfhost_reserve") (param i32) (result i32) i32.const 1024)
  (func (export "wfhost_init") (param i32) (result i64) i64.const 1)
  (func (export "wfhost_step") (param i32) (result i64) i64.const 0x0000001000000008)
  (func (export "wfhost_panic_message") (result i64) i64.const 0)
  (@custom "wfhost-manifest" "wfhost-abi 2\nentry go\n"))"#;

/// The only instance is held by a process that never hibernates: a hibernated process woken by a
/// message waits for an instance without being stepped, and fails with `Limit` once no instance
/// has been given back for twice the step time limit.
#[test]
fn a_wake_that_no_instance_will_serve_fails_after_the_stall_period() {
    let host = Host::builder()
        .workers(2)
        .pooling(1)
        .hibernation(Hibernation::Always)
        .limits(Limits::default().step_time_limit(Duration::from_millis(100)))
        .build()
        .unwrap();
    host.load_module("probe", PROBE).unwrap();
    host.load_module_bytes("sticky", &wat::parse_str(STICKY).unwrap())
        .unwrap();
    let waiter = host.spawn("probe", "collect", json(json!(1))).unwrap();
    until(&host, "the waiter to hibernate", |r| r.hibernated == 1);
    let sticky = host.spawn("sticky", "go", Payload::empty()).unwrap();
    // Its first step, and the waiter's: then both wait.
    while host.counters().steps < 2 {
        std::thread::yield_now();
    }
    let steps = host.counters().steps;
    assert_eq!(steps, 2);
    host.send(waiter.pid(), json(json!(7))).unwrap();
    let error = waiter.wait_timeout(PATIENCE).expect("failed").unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Limit, "{error}");
    assert!(
        error.message().contains(
            "could not be woken: no instance was given back for 200ms (every instance is held by \
             a process that does not hibernate)"
        ),
        "{error}"
    );
    // It waited without a single step, its own or the sticky process's.
    assert_eq!(host.counters().steps, steps);
    drop(sticky);
    host.shutdown(Duration::ZERO);
}

/// Warm instances count against the capacity, but a spawn that needs one gets it from a warm
/// instance rather than a refusal.
#[test]
fn a_spawn_that_finds_no_free_instance_takes_a_warm_one() {
    let host = Host::builder()
        .workers(1)
        .pooling(2)
        .hibernation(Hibernation::Off)
        .build()
        .unwrap();
    host.load_module("probe", PROBE).unwrap();
    host.spawn("probe", "echo", json(json!(1)))
        .unwrap()
        .wait_timeout(PATIENCE)
        .expect("finished")
        .unwrap();
    assert_eq!(host.residency().warm_instances, 1);
    let waiting: Vec<_> = (0..2)
        .map(|_| host.spawn("probe", "collect", json(json!(1))).unwrap())
        .collect();
    for (n, run) in waiting.iter().enumerate() {
        host.send(run.pid(), json(json!(n))).unwrap();
    }
    for (n, run) in waiting.into_iter().enumerate() {
        let result = run.wait_timeout(PATIENCE).expect("finished").unwrap();
        assert_eq!(result.decode::<Vec<usize>>().unwrap(), [n]);
    }
    host.shutdown(Duration::from_secs(1));
}

/// Checks, in `init`, that it starts as a fresh instance does (its data byte 5, its mutable
/// global 0, zeros past its input: a divide-by-zero trap if not), then leaves a secret in all of
/// them without growing its memory. Its step traps with `unreachable`, ending the process.
const RESIDUE: &str = r#"
(module
  (memory (export "memory") 1)
  (global $left (mut i32) (i32.const 0))
  (data (i32.const 4096) "\05")
  (func $leaked (i32.div_u (i32.const 1) (i32.const 0)) drop)
  (func (export "wfhost_reserve") (param i32) (result i32) i32.const 1024)
  (func (export "wfhost_init") (param i32) (result i64)
    (local $at i32)
    (if (i32.ne (i32.load8_u (i32.const 4096)) (i32.const 5)) (then (call $leaked)))
    (if (i32.ne (global.get $left) (i32.const 0)) (then (call $leaked)))
    (local.set $at (i32.const 8192))
    (loop $scan
      (if (i32.load8_u (local.get $at)) (then (call $leaked)))
      (local.set $at (i32.add (local.get $at) (i32.const 1)))
      (br_if $scan (i32.lt_u (local.get $at) (i32.const 65536))))
    (memory.fill (i32.const 2048) (i32.const 0xAA) (i32.const 63488))
    (global.set $left (i32.const 7))
    (i32.store8 (i32.const 0) (i32.const 0))
    i64.const 1)
  (func (export "wfhost_step") (param i32) (result i64) unreachable)
  (func (export "wfhost_panic_message") (result i64) i64.const 0)
  (@custom "wfhost-manifest" "wfhost-abi 2\nentry go\n"))
"#;

/// A process started in the warm instance another process of its module left finds nothing of
/// it: its memory is the image again and its globals their initial values.
#[test]
fn a_process_started_in_a_warm_instance_finds_nothing_of_the_last_one() {
    let host = Host::builder()
        .workers(1)
        .hibernation(Hibernation::Off)
        .build()
        .unwrap();
    host.load_module_bytes("residue", &wat::parse_str(RESIDUE).unwrap())
        .unwrap();
    for i in 0..5 {
        let error = host
            .spawn("residue", "go", Payload::empty())
            .unwrap()
            .wait_timeout(PATIENCE)
            .expect("finished")
            .expect_err("its step traps");
        assert!(
            error.to_string().contains("unreachable"),
            "process {i} found what the last one left: {error}"
        );
    }
    let residency = host.residency();
    // The first started fresh; each later one in the instance the one before it left.
    assert_eq!((residency.warm_starts, residency.warm_instances), (4, 1));
    host.shutdown(Duration::from_secs(1));
}

/// A module unloaded, or replaced under its name, is freed once nothing runs it: its compiled
/// code, its memory image and its warm instances.
#[test]
fn a_module_nothing_runs_any_more_is_freed() {
    let host = Host::builder()
        .workers(1)
        .hibernation(Hibernation::Always)
        .build()
        .unwrap();
    host.load_module("probe", PROBE).unwrap();
    host.spawn("probe", "echo", json(json!(1)))
        .unwrap()
        .wait_timeout(PATIENCE)
        .expect("finished")
        .unwrap();
    let loaded = host.residency();
    assert_eq!((loaded.modules, loaded.warm_instances), (1, 1));
    assert!(loaded.module_image_bytes > 0);
    // A process still running keeps the module after it is replaced.
    let waiting = host.spawn("probe", "collect", json(json!(1))).unwrap();
    host.load_module("probe", HELLO).unwrap();
    assert_eq!(host.residency().modules, 2);
    host.send(waiting.pid(), json(json!(5))).unwrap();
    waiting.wait_timeout(PATIENCE).expect("finished").unwrap();
    let replaced = host.residency();
    assert_eq!((replaced.modules, replaced.warm_instances), (1, 0));
    host.unload_module("probe").unwrap();
    let unloaded = host.residency();
    assert_eq!(
        (
            unloaded.modules,
            unloaded.module_image_bytes,
            unloaded.live_instances
        ),
        (0, 0, 0)
    );
    let error = host.spawn("probe", "greet", json(json!("x"))).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::UnknownModule);
    host.shutdown(Duration::from_secs(1));
}

/// A hibernated process keeps no input buffer: the 1 MiB its last step took is given back.
#[test]
fn a_hibernated_process_keeps_no_input_buffer() {
    let host = Host::builder()
        .workers(1)
        .hibernation(Hibernation::Always)
        .build()
        .unwrap();
    host.load_module("probe", PROBE).unwrap();
    let run = host
        .spawn("probe", "cleanup_on_cancel", json(json!(null)))
        .unwrap();
    until(&host, "the process to hibernate", |r| r.hibernated == 1);
    host.send(run.pid(), json(json!("x".repeat(MIB)))).unwrap();
    until(&host, "the process to hibernate again", |r| {
        r.hibernations == 2 && r.hibernated == 1
    });
    assert_eq!(host.residency().buffer_bytes, 0);
    host.cancel(run.pid()).unwrap();
    let result = run.wait_timeout(PATIENCE).expect("finished").unwrap();
    assert_eq!(result.decode::<String>().unwrap(), "cleaned up");
    host.shutdown(Duration::from_secs(1));
}

/// Reads what the last instance in its slot left. `init` checks that its memory is one page, grows
/// it to four and checks that all four hold zeros past its input (a divide-by-zero trap if not),
/// then writes 0xAA over all of them: a secret the next process must not see. Its step traps with
/// `unreachable`, ending the process.
const SNOOP: &str = r#"
(module
  (memory (export "memory") 1)
  (data (i32.const 0) "\00")
  (func $leaked (i32.div_u (i32.const 1) (i32.const 0)) drop)
  (func (export "wfhost_reserve") (param i32) (result i32) i32.const 1024)
  (func (export "wfhost_init") (param i32) (result i64)
    (local $at i32)
    (if (i32.ne (memory.size) (i32.const 1)) (then (call $leaked)))
    (drop (memory.grow (i32.const 3)))
    ;; Past the input the host wrote at 1024 (none here): all zeros, the grown pages included.
    (local.set $at (i32.const 2048))
    (loop $scan
      (if (i32.load8_u (local.get $at)) (then (call $leaked)))
      (local.set $at (i32.add (local.get $at) (i32.const 1)))
      (br_if $scan (i32.lt_u (local.get $at) (i32.const 262144))))
    (memory.fill (i32.const 1) (i32.const 0xAA) (i32.const 262143))
    ;; The init answer, Ok(()): one zero byte at address 0.
    (i32.store8 (i32.const 0) (i32.const 0))
    i64.const 1)
  (func (export "wfhost_step") (param i32) (result i64) unreachable)
  (func (export "wfhost_panic_message") (result i64) i64.const 0)
  (@custom "wfhost-manifest" "wfhost-abi 2\nentry go\n"))
"#;

/// 300 processes one after another on one worker, each checking it starts pristine.
fn each_process_starts_pristine(host: Host) {
    assert!(host.capacity().pooled, "{}", host.capacity());
    host.load_module_bytes("snoop", &wat::parse_str(SNOOP).unwrap())
        .unwrap();
    for i in 0..300 {
        let error = host
            .spawn("snoop", "go", Payload::empty())
            .unwrap()
            .wait_timeout(PATIENCE)
            .expect("finished")
            .expect_err("its step traps");
        assert!(
            error.to_string().contains("unreachable"),
            "process {i} did not start pristine: {error}"
        );
    }
    // The slots were reused: far fewer than the processes. The host keeps up to 16 of the
    // module's instances warm, each in a slot of its own, and without the page scan a slot
    // given back waits for a batch of up to 64 to be decommitted before it is reused.
    let residency = host.residency();
    assert!(
        (1..=16 + 64 + 1).contains(&residency.pooled_idle_slots),
        "{residency:?}"
    );
    host.shutdown(PATIENCE);
}

/// Pooled instance slots (the default) are reused: what one process wrote, and the memory it
/// grew, never reach the next process in its slot.
#[test]
fn a_pooled_slot_keeps_nothing_of_its_last_process() {
    each_process_starts_pristine(Host::builder().workers(1).build().unwrap());
}

/// The same with slots reset in place, found by the page-map scan.
#[test]
fn a_slot_reset_in_place_keeps_nothing_of_its_last_process() {
    let host = Host::builder()
        .workers(1)
        .page_scan_reset(true)
        .build()
        .unwrap();
    each_process_starts_pristine(host);
}
