//! A host filled to the capacity the operating system allows, at the default `vm.max_map_count`.
//! Its own test binary (so its own process): the mapping limit is per process, and another test
//! running beside it would take mappings the host counted on.

mod waiting;

use waiting::{message_all_and_check, spawn_waiting};
use wfhost::{CapacityLimit, ErrorKind, Hibernation, Host};
use wfhost_test_programs::PROBE;

#[test]
fn a_spawn_past_the_operating_systems_mapping_limit_fails_cleanly() {
    // Without hibernation, every process holds its instance: the OS limit bounds processes.
    let host = Host::builder()
        .workers(2)
        .hibernation(Hibernation::Off)
        .build()
        .unwrap();
    host.load_module("probe", PROBE).unwrap();
    let capacity = host.capacity();
    let max_map_count = match capacity.limited_by {
        CapacityLimit::MapCount { max_map_count, .. } if capacity.processes <= 40_000 => {
            max_map_count
        }
        _ => {
            // vm.max_map_count is raised on this machine (some distributions ship 1,048,576):
            // filling hundreds of thousands of processes is the benchmark's job, not a test's.
            eprintln!("skipped: the OS mapping limit is not the default here ({capacity})");
            return;
        }
    };
    // Every process the host accepts really runs: the estimate leaves the OS room.
    let (runs, refused) = spawn_waiting(&host, capacity.processes + 1);
    assert_eq!(runs.len(), capacity.processes);
    let refused = refused.expect("one past capacity is refused");
    assert_eq!(refused.kind(), ErrorKind::Limit);
    assert!(
        refused.message().contains(&format!(
            "as many as the operating system's memory-mapping limit allows (vm.max_map_count = \
             {max_map_count}"
        )),
        "{refused}"
    );
    assert!(refused.message().contains("sysctl -w vm.max_map_count="));
    message_all_and_check(&host, runs);
}
