//! A store of many ended workflows, for the benchmarks that read one (the HTTP API's `list`,
//! the web UI's): ids `order-00000000` and up, every tenth of entry point `refund` and the rest
//! `order`; 98% completed, 1% failed, 1% cancelled.

use std::path::Path;
use std::sync::Arc;

use wfhost::__testing::{Ending, NewWorkflow, Op, Open as _};
use wfhost::store::Location;
use wfhost::{Payload, SyncMode};

/// Writes `workflows` ended workflows into a new store at `path`, 20,000 a commit.
pub fn fill(path: &Path, workflows: usize) {
    let mut store = Location::from(path)
        .open(SyncMode::Normal)
        .expect("a store");
    let hash = "00".repeat(32);
    store
        .commit(&[Op::Module {
            hash: hash.clone(),
            bytes: Arc::from(&b"not a module"[..]),
        }])
        .expect("written");
    let input = postcard::to_allocvec(&Payload::json_bytes(b"1".to_vec())).expect("encoded");
    let result = postcard::to_allocvec(&Payload::json_bytes(b"2".to_vec())).expect("encoded");
    let batch = 20_000;
    for from in (0..workflows).step_by(batch) {
        let mut ops = Vec::with_capacity(batch * 2);
        for n in from..(from + batch).min(workflows) {
            let num = n as u64 + 1;
            ops.push(Op::Start(NewWorkflow {
                num,
                id: format!("order-{n:08}"),
                parent: None,
                module: hash.clone(),
                module_name: "orders".into(),
                entry: if n % 10 == 0 { "refund" } else { "order" }.into(),
                input: input.clone(),
                started: 1_700_000_000_000 + num,
                trace: None,
            }));
            // Every one ended (a host would otherwise take up the unfinished ones): most
            // completed, some failed, some cancelled.
            let ending = match n % 100 {
                7 => Ending::Failed {
                    kind: "trap".into(),
                    message: "unreachable".into(),
                },
                13 => Ending::Failed {
                    kind: "cancelled".into(),
                    message: "cancelled".into(),
                },
                _ => Ending::Done(result.clone()),
            };
            ops.push(Op::End {
                num,
                ending,
                at: 1_700_000_000_000 + num + 20,
            });
        }
        store.commit(&ops).expect("written");
    }
}
