//! The stores on their own, SQLite and PostgreSQL alike: steps read back in order (from SQLite's
//! log and its table both) and across a reopen; messages sent and taken in one commit never
//! written; ends, cancels, refusals and snapshots in the order a batch gives them; counts by
//! status and the children of a workflow, as the web UI reads them.

use wfhost::__testing::{
    Cancel, Ending, Filter, Location, NewMessage, NewSnapshot, NewStep, NewWorkflow, Op, Open as _,
    State, StateCounts, Store, SyncMode,
};
use wfhost_test_programs::postgres::Postgres;

/// A new SQLite store and a new PostgreSQL one, for a test named `name`.
fn locations(name: &str) -> Vec<Location> {
    let path = super::common::tempdir(&format!("store-{name}")).join("wf.db");
    vec![
        Location::Sqlite(path),
        Location::Postgres(Postgres::shared().database(name)),
    ]
}

fn open(location: &Location) -> Box<dyn Store> {
    location.open(SyncMode::Normal).unwrap()
}

fn start(num: u64) -> Op {
    Op::Start(NewWorkflow {
        num,
        id: format!("w{num}"),
        parent: None,
        module: "m".into(),
        module_name: "m".into(),
        entry: "main".into(),
        input: Vec::new(),
        started: 0,
    })
}

fn step(num: u64, seq: u64, consumed: Vec<u64>) -> Op {
    Op::Step(NewStep {
        num,
        seq,
        at: seq,
        record: format!("{num}.{seq}").into_bytes(),
        consumed,
        took_cancel: false,
    })
}

fn message(id: u64, receiver: u64) -> Op {
    Op::Message(NewMessage {
        id,
        receiver,
        sender: 0,
        payload: vec![1, 2, 3],
        local: true,
    })
}

fn seqs(store: &mut dyn Store, num: u64, after: u64) -> Vec<u64> {
    let steps = store.steps(num, after).unwrap();
    for s in &steps {
        assert_eq!(s.record, format!("{num}.{}", s.seq).into_bytes());
        assert_eq!(s.at, s.seq);
    }
    steps.iter().map(|s| s.seq).collect()
}

#[test]
fn steps_read_back_in_order_across_the_log_and_the_table_and_survive_a_reopen() {
    for location in locations("log") {
        steps_read_back_in_order(&location);
    }
}

fn steps_read_back_in_order(location: &Location) {
    let mut store = open(location);
    store.commit(&[start(1), start(2), start(3)]).unwrap();
    // 40,000 steps of 1 and 2 interleaved, a commit per 200: more than the log holds before
    // it is moved (32,768), so the first 16,400 of each are in `steps` and the rest in the log.
    let mut next = [0u64; 3];
    for _ in 0..200 {
        let mut batch = Vec::new();
        for _ in 0..100 {
            for num in [1u64, 2] {
                next[num as usize] += 1;
                batch.push(step(num, next[num as usize], Vec::new()));
            }
        }
        store.commit(&batch).unwrap();
        store.tidy(false).unwrap();
    }
    let all: Vec<u64> = (1..=20_000).collect();
    assert_eq!(seqs(&mut *store, 1, 0), all);
    assert_eq!(
        seqs(&mut *store, 2, 16_390),
        (16_391..=20_000).collect::<Vec<_>>()
    );
    assert_eq!(
        seqs(&mut *store, 2, 19_990),
        (19_991..=20_000).collect::<Vec<_>>()
    );
    assert_eq!(seqs(&mut *store, 3, 0), Vec::<u64>::new());
    let counts: Vec<u64> = store
        .workflows(false)
        .unwrap()
        .iter()
        .map(|w| w.steps)
        .collect();
    assert_eq!(counts, vec![20_000, 20_000, 0]);
    assert_eq!(store.workflow("w2").unwrap().unwrap().steps, 20_000);
    drop(store);
    let mut store = open(location);
    assert_eq!(
        seqs(&mut *store, 1, 16_000),
        (16_001..=20_000).collect::<Vec<_>>()
    );
    store.tidy(true).unwrap();
    assert_eq!(seqs(&mut *store, 1, 0), all);
    assert_eq!(store.workflow_by_num(1).unwrap().unwrap().steps, 20_000);
    // A step journaled twice is refused, whether the first is in the log or moved already.
    assert!(store.commit(&[step(1, 20_000, Vec::new())]).is_err());
    store.commit(&[step(1, 20_001, Vec::new())]).unwrap();
    assert!(store.commit(&[step(1, 20_001, Vec::new())]).is_err());
}

fn waiting(store: &mut dyn Store) -> Vec<u64> {
    let messages = store.messages().unwrap();
    messages.iter().map(|m| m.message.id).collect()
}

#[test]
fn a_message_sent_and_taken_in_one_commit_is_never_written_and_its_number_never_reused() {
    for location in locations("elide") {
        messages_sent_and_taken(&location);
    }
}

fn messages_sent_and_taken(location: &Location) {
    let mut store = open(location);
    store.commit(&[start(1), start(2)]).unwrap();
    // 7 is sent and taken in one commit; 8 is taken in the next; 9 is still waiting.
    store
        .commit(&[
            message(7, 2),
            message(8, 2),
            message(9, 2),
            step(2, 1, vec![7]),
        ])
        .unwrap();
    assert_eq!(waiting(&mut *store), vec![8, 9]);
    store.commit(&[step(2, 2, vec![8])]).unwrap();
    assert_eq!(waiting(&mut *store), vec![9]);
    // Taken in the commit that sent it, and the last of the numbers given: still counted.
    store
        .commit(&[message(10, 1), step(1, 1, vec![10])])
        .unwrap();
    assert_eq!(store.high_water().unwrap(), (2, 10));
}

#[test]
fn counts_by_status_and_the_children_of_a_workflow_read_alike_in_both_stores() {
    for location in locations("counts") {
        counts_and_children(&location);
    }
}

fn counts_and_children(location: &Location) {
    let mut store = open(location);
    let child = |num: u64, parent: u64| {
        Op::Start(NewWorkflow {
            num,
            id: format!("w{parent}/{num}"),
            parent: Some(parent),
            module: "m".into(),
            module_name: "m".into(),
            entry: "child".into(),
            input: Vec::new(),
            started: num,
        })
    };
    let failed = |num: u64, kind: &str| Op::End {
        num,
        ending: Ending::Failed {
            kind: kind.into(),
            message: "no".into(),
        },
        at: 99,
    };
    store
        .commit(&[
            Op::Module {
                hash: "m".into(),
                bytes: vec![0, 97, 115, 109].into(),
            },
            start(1),
            child(2, 1),
            child(3, 1),
            start(4),
            child(5, 1),
            child(6, 4),
            start(7),
        ])
        .unwrap();
    store
        .commit(&[
            end(2, b"r"),
            failed(3, "cancelled"),
            failed(6, "trap"),
            end(7, b"r"),
        ])
        .unwrap();
    let everything = Filter {
        state: None,
        cancelled: None,
        entry: None,
        prefix: None,
        started_before: None,
        started_after: None,
        top_level: false,
        parent: None,
        max_bytes: None,
    };
    let counts = |filter: &Filter, store: &mut Box<dyn Store>| store.counts(filter).unwrap();
    let all = counts(&everything, &mut store);
    let want = |running, completed, failed, cancelled| StateCounts {
        running,
        completed,
        failed,
        cancelled,
    };
    assert_eq!(all, want(3, 2, 1, 1), "{location:?}");
    let top = Filter {
        top_level: true,
        ..everything.clone()
    };
    assert_eq!(counts(&top, &mut store), want(2, 1, 0, 0), "{location:?}");
    let of_one = Filter {
        parent: Some(1),
        ..everything.clone()
    };
    assert_eq!(
        counts(&of_one, &mut store),
        want(1, 1, 0, 1),
        "{location:?}"
    );
    let children: Vec<u64> = store
        .page(&of_one, 0, 10)
        .unwrap()
        .iter()
        .map(|w| w.start.num)
        .collect();
    assert_eq!(children, [2, 3, 5], "{location:?}");
    // Pages of the children follow the cursor.
    let after_first: Vec<u64> = store
        .page(&of_one, 2, 1)
        .unwrap()
        .iter()
        .map(|w| w.start.num)
        .collect();
    assert_eq!(after_first, [3], "{location:?}");
    let by_entry = Filter {
        entry: Some("child".into()),
        parent: Some(4),
        ..everything
    };
    assert_eq!(
        counts(&by_entry, &mut store),
        want(0, 0, 1, 0),
        "{location:?}"
    );
}

fn end(num: u64, result: &[u8]) -> Op {
    Op::End {
        num,
        ending: Ending::Done(result.to_vec()),
        at: 99,
    }
}

fn snapshot(num: u64, seq: u64) -> Op {
    Op::Snapshot(NewSnapshot {
        num,
        seq,
        module: "m".into(),
        state: vec![seq as u8],
    })
}

#[test]
fn ends_cancels_refusals_and_snapshots_take_effect_in_the_order_of_their_batch() {
    for location in locations("order") {
        batch_order(&location);
    }
}

fn batch_order(location: &Location) {
    let mut store = open(location);
    store
        .commit(&[
            Op::Module {
                hash: "m".into(),
                bytes: vec![0, 97, 115, 109].into(),
            },
            start(1),
            start(2),
            start(3),
        ])
        .unwrap();
    // A module kept twice is kept once.
    store
        .commit(&[Op::Module {
            hash: "m".into(),
            bytes: vec![0, 97, 115, 109].into(),
        }])
        .unwrap();
    assert_eq!(store.module("m").unwrap(), Some(vec![0, 97, 115, 109]));
    assert_eq!(store.module("n").unwrap(), None);
    // Two snapshots of 1 in one batch: the later one stays. 2 is sent 5, which is refused, and
    // 6, which waits; then 2 ends, and its snapshot goes while 6 stays, unread. A cancel of 3
    // is asked, then taken by its step.
    let mut took = match step(3, 1, vec![]) {
        Op::Step(step) => step,
        _ => unreachable!(),
    };
    took.took_cancel = true;
    store
        .commit(&[
            snapshot(1, 1),
            snapshot(1, 2),
            snapshot(2, 1),
            // From workflow 3: a refusal its sender may not have heard of is kept for it.
            Op::Message(NewMessage {
                id: 5,
                receiver: 2,
                sender: 3,
                payload: vec![1, 2, 3],
                local: true,
            }),
            Op::Refused {
                id: 5,
                error: "full".into(),
            },
            message(6, 2),
            Op::Cancel { num: 3 },
            Op::Step(took),
        ])
        .unwrap();
    let held = store.messages().unwrap();
    assert_eq!(held.len(), 2);
    assert_eq!(held[0].refused.as_deref(), Some("full"));
    assert_eq!(held[1].refused, None);
    assert_eq!(store.snapshot(1).unwrap().unwrap().seq, 2);
    assert_eq!(
        store.workflow_by_num(3).unwrap().unwrap().cancel,
        Cancel::Taken
    );
    store
        .commit(&[end(2, b"two"), message(7, 1), Op::Cancel { num: 1 }])
        .unwrap();
    // A message acknowledged to its sender is never deleted unread: 2 ended without taking 6,
    // which stays, counted, though recovery has nothing more to do with it. 5's refusal is
    // kept for its sender, which runs.
    assert_eq!(waiting(&mut *store), vec![5, 7]);
    assert_eq!(store.workflow("w2").unwrap().unwrap().unread, 1);
    assert_eq!(store.workflow("w1").unwrap().unwrap().unread, 1);
    assert_eq!(store.snapshot(2).unwrap(), None);
    assert_eq!(store.snapshot(1).unwrap().unwrap().seq, 2);
    let two = store.workflow("w2").unwrap().unwrap();
    assert_eq!(two.state, State::Done);
    assert_eq!(two.ending, Some(Ending::Done(b"two".to_vec())));
    assert_eq!(two.finished, Some(99));
    // An end is written once: a second one changes nothing.
    store.commit(&[end(2, b"again")]).unwrap();
    assert_eq!(
        store.workflow("w2").unwrap().unwrap().ending,
        Some(Ending::Done(b"two".to_vec()))
    );
    assert_eq!(
        store.workflow_by_num(1).unwrap().unwrap().cancel,
        Cancel::Asked
    );
    let unfinished: Vec<u64> = store
        .workflows(true)
        .unwrap()
        .iter()
        .map(|w| w.start.num)
        .collect();
    assert_eq!(unfinished, vec![1, 3]);
    assert_eq!(store.high_water().unwrap(), (3, 7));
    // A workflow id started twice is refused, and the batch with it writes nothing.
    let error = store.commit(&[message(8, 1), start(1)]).unwrap_err();
    assert!(error.message().contains("could not write"), "{error}");
    assert_eq!(waiting(&mut *store), vec![5, 7]);
    // The reader sees what the writer wrote.
    let mut reader = store.reader().unwrap();
    assert_eq!(reader.workflows(false).unwrap().len(), 3);
}

/// Both stores keep the journal's tables, columns and indexes as `shape.rs` describes them: the
/// two schemas are written by hand, and this keeps them alike.
#[test]
fn both_stores_keep_the_journal_in_one_shape() {
    for location in locations("shape") {
        drop(open(&location));
        let shape = wfhost::__testing::shape(&location).unwrap();
        assert_eq!(shape.lacks(), Vec::<String>::new(), "{location}: {shape:?}");
    }
}
