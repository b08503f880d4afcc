//! The SQLite store on its own: steps appended to its log and moved into place, read back in
//! order from both; messages sent and taken in one commit never written.

use wfhost::store::{NewMessage, NewStep, NewWorkflow, Op, SqliteStore, Store, SyncMode};

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
    })
}

fn seqs(store: &mut SqliteStore, num: u64, after: u64) -> Vec<u64> {
    let steps = store.steps(num, after).unwrap();
    for s in &steps {
        assert_eq!(s.record, format!("{num}.{}", s.seq).into_bytes());
        assert_eq!(s.at, s.seq);
    }
    steps.iter().map(|s| s.seq).collect()
}

#[test]
fn steps_read_back_in_order_across_the_log_and_the_table_and_survive_a_reopen() {
    let path = super::common::tempdir("store-log").join("wf.db");
    let mut store = SqliteStore::open(&path, SyncMode::Normal).unwrap();
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
    assert_eq!(seqs(&mut store, 1, 0), all);
    assert_eq!(
        seqs(&mut store, 2, 16_390),
        (16_391..=20_000).collect::<Vec<_>>()
    );
    assert_eq!(
        seqs(&mut store, 2, 19_990),
        (19_991..=20_000).collect::<Vec<_>>()
    );
    assert_eq!(seqs(&mut store, 3, 0), Vec::<u64>::new());
    let counts: Vec<u64> = store
        .workflows(false)
        .unwrap()
        .iter()
        .map(|w| w.steps)
        .collect();
    assert_eq!(counts, vec![20_000, 20_000, 0]);
    assert_eq!(store.workflow("w2").unwrap().unwrap().steps, 20_000);
    drop(store);
    let mut store = SqliteStore::open(&path, SyncMode::Normal).unwrap();
    assert_eq!(
        seqs(&mut store, 1, 16_000),
        (16_001..=20_000).collect::<Vec<_>>()
    );
    store.tidy(true).unwrap();
    assert_eq!(seqs(&mut store, 1, 0), all);
    assert_eq!(store.workflow_by_num(1).unwrap().unwrap().steps, 20_000);
    // A step journaled twice is refused, whether the first is in the log or moved already.
    assert!(store.commit(&[step(1, 20_000, Vec::new())]).is_err());
    store.commit(&[step(1, 20_001, Vec::new())]).unwrap();
    assert!(store.commit(&[step(1, 20_001, Vec::new())]).is_err());
}

fn waiting(store: &mut SqliteStore) -> Vec<u64> {
    let messages = store.messages().unwrap();
    messages.iter().map(|m| m.message.id).collect()
}

#[test]
fn a_message_sent_and_taken_in_one_commit_is_never_written_and_its_number_never_reused() {
    let path = super::common::tempdir("store-elide").join("wf.db");
    let mut store = SqliteStore::open(path, SyncMode::Normal).unwrap();
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
    assert_eq!(waiting(&mut store), vec![8, 9]);
    store.commit(&[step(2, 2, vec![8])]).unwrap();
    assert_eq!(waiting(&mut store), vec![9]);
    // Taken in the commit that sent it, and the last of the numbers given: still counted.
    store
        .commit(&[message(10, 1), step(1, 1, vec![10])])
        .unwrap();
    assert_eq!(store.high_water().unwrap(), (2, 10));
}
