//! The stores on their own, SQLite and PostgreSQL alike: steps read back in order (from SQLite's
//! log and its table both) and across a reopen; messages sent and taken in one commit never
//! written; ends, cancels, refusals and snapshots in the order a batch gives them; counts by
//! status and the children of a workflow, as the web UI reads them.

use wfhost::__testing::{
    Cancel, Ending, Filter, Held, HostMessage, Location, ModuleName, NewMessage, NewSnapshot,
    NewStep, NewWorkflow, Op, Open as _, PgStore, PruneFilter, State, StateCounts, Store,
    Submit as _, SyncMode,
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

/// A filter that lets every workflow through.
fn everything() -> Filter {
    Filter {
        state: None,
        cancelled: None,
        entry: None,
        prefix: None,
        started_before: None,
        started_after: None,
        top_level: false,
        parent: None,
        held: None,
        max_bytes: None,
    }
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
        // Odd workflows are traced: the store keeps their runs' parent.
        trace: (num % 2 == 1).then(|| format!("00-{num:032x}-{num:016x}-01")),
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
        calls_done: Vec::new(),
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
    // Each start reads back as it was written, its trace with it.
    for num in 1..=3 {
        let Op::Start(written) = start(num) else {
            unreachable!()
        };
        let read = store.workflow(&format!("w{num}")).unwrap().unwrap().start;
        assert_eq!(read, written);
    }
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

/// On PostgreSQL, a start that gives way to a workflow of the same id (a host's, on a store
/// hosts share) writes nothing, and its commit says so: a host learns from the commit that its
/// start won without reading the row back.
#[test]
fn a_commit_says_whether_every_start_that_gives_way_was_written() {
    let location = Location::Postgres(Postgres::shared().database("start_once"));
    let mut store = open(&location);
    let once = |num: u64, id: &str| {
        let Op::Start(mut workflow) = start(num) else {
            unreachable!()
        };
        workflow.id = id.to_string();
        Op::StartOnce(workflow)
    };
    let committed = store.commit(&[once(1, "a"), once(2, "b")]).unwrap();
    assert!(committed.every_start_written);
    // "a" is workflow 1's: the start of 3 under it gives way, the start of 4 is written.
    let committed = store.commit(&[once(3, "a"), once(4, "c")]).unwrap();
    assert!(!committed.every_start_written);
    // Gave way in the second of two segments of one batch (a cancel between them).
    let committed = store
        .commit(&[once(5, "d"), Op::Cancel { num: 5 }, once(6, "b")])
        .unwrap();
    assert!(!committed.every_start_written);
    // Nothing but steps: nothing gave way.
    assert!(
        store
            .commit(&[step(1, 1, vec![])])
            .unwrap()
            .every_start_written
    );
    let ids: Vec<(String, u64)> = store
        .workflows(false)
        .unwrap()
        .into_iter()
        .map(|w| (w.start.id, w.start.num))
        .collect();
    assert_eq!(
        ids,
        vec![
            ("a".into(), 1),
            ("b".into(), 2),
            ("c".into(), 4),
            ("d".into(), 5)
        ]
    );
    // On SQLite, whose one host reads before it starts, a start of an id it has is an error.
    let path = super::common::tempdir("store-start-once").join("wf.db");
    let mut sqlite = open(&Location::Sqlite(path));
    assert!(sqlite.commit(&[once(1, "a")]).unwrap().every_start_written);
    assert!(sqlite.commit(&[once(2, "a")]).is_err());
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
            trace: None,
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
    let everything = everything();
    let counts = |filter: &Filter, store: &mut Box<dyn Store>| store.counts(filter).unwrap();
    let all = counts(&everything, &mut store);
    let want = |running, completed, failed, cancelled| StateCounts {
        running,
        completed,
        failed,
        cancelled,
        ..Default::default()
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
        ..everything.clone()
    };
    assert_eq!(
        counts(&by_entry, &mut store),
        want(0, 0, 1, 0),
        "{location:?}"
    );
    // Counts of one entry point, or of all, come from the counts the store keeps as
    // workflows start and end; any other filter reads the workflows. Both agree.
    let of_entry = |entry: &str| Filter {
        entry: Some(entry.into()),
        ..everything.clone()
    };
    assert_eq!(
        counts(&of_entry("child"), &mut store),
        want(1, 1, 1, 1),
        "{location:?}"
    );
    assert_eq!(
        counts(&of_entry("main"), &mut store),
        want(2, 1, 0, 0),
        "{location:?}"
    );
    assert_eq!(counts(&of_entry("none"), &mut store), want(0, 0, 0, 0));
    let read = Filter {
        prefix: Some("w".into()),
        ..everything.clone()
    };
    assert_eq!(counts(&read, &mut store), all, "{location:?}");
    // An end that finds its workflow ended already changes no count.
    store
        .commit(&[end(2, b"again"), failed(7, "trap"), end(5, b"r")])
        .unwrap();
    assert_eq!(
        counts(&everything, &mut store),
        want(2, 3, 1, 1),
        "{location:?}"
    );
    assert_eq!(
        counts(&everything, &mut store),
        counts(&read, &mut store),
        "{location:?}"
    );
    // Of the two unfinished (1 and 4), one paused and one damaged: counted apart (damaged wins
    // over paused), and listed by it.
    store
        .commit(&[
            Op::Pause {
                num: 1,
                paused: true,
            },
            Op::Pause {
                num: 4,
                paused: true,
            },
            Op::Damaged {
                num: 4,
                why: Some("step 2 does not decode".into()),
            },
        ])
        .unwrap();
    for filter in [&everything, &read, &top] {
        let held = counts(filter, &mut store);
        assert_eq!(
            (held.running, held.paused, held.damaged),
            (2, 1, 1),
            "{location:?} {filter:?}"
        );
    }
    let held = |held: Held, store: &mut Box<dyn Store>| -> Vec<u64> {
        let filter = Filter {
            state: Some(State::Running),
            held: Some(held),
            ..everything.clone()
        };
        let page = store.page(&filter, 0, 10).unwrap();
        page.iter().map(|w| w.start.num).collect()
    };
    assert_eq!(held(Held::Paused, &mut store), [1], "{location:?}");
    assert_eq!(held(Held::Damaged, &mut store), [4], "{location:?}");
    assert!(held(Held::No, &mut store).is_empty(), "{location:?}");
}

#[test]
fn a_store_from_before_kept_counts_counts_the_workflows_it_had_once_migrated() {
    for location in locations("counts-migrated") {
        let mut store = open(&location);
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
        store
            .commit(&[
                end(2, b"r"),
                Op::End {
                    num: 3,
                    ending: Ending::Failed {
                        kind: "cancelled".into(),
                        message: "no".into(),
                    },
                    at: 99,
                },
            ])
            .unwrap();
        drop(store);
        // Back to the schema before the kept counts, with two more workflows the counts miss.
        match &location {
            Location::Sqlite(path) => {
                let conn = rusqlite::Connection::open(path).unwrap();
                conn.execute_batch(
                    "DROP TRIGGER workflow_counts_started; DROP TRIGGER workflow_counts_changed; \
                     DROP TRIGGER workflow_counts_removed; DROP TABLE workflow_counts; \
                     DROP INDEX workflows_held; DROP TABLE task_outcomes; \
                     ALTER TABLE modules DROP COLUMN kept; ALTER TABLE modules DROP COLUMN unused_since; \
                     DROP INDEX workflows_finished; DROP INDEX workflows_module; \
                     ALTER TABLE workflows DROP COLUMN paused; DROP TABLE schedules; \
                     ALTER TABLE workflows DROP COLUMN run; DROP TABLE module_names; \
                     ALTER TABLE workflows DROP COLUMN trace; \
                     INSERT INTO workflows (num, id, module, module_name, entry, input, started) \
                     VALUES (4, 'w4', 'm', 'm', 'main', x'', 0), \
                     (5, 'w5', 'm', 'm', 'other', x'', 0); \
                     PRAGMA user_version = 7;",
                )
                .unwrap();
            }
            Location::Postgres(url) => {
                Postgres::shared().psql(
                    url,
                    "SET search_path TO wfhost; DROP INDEX workflows_held; \
                     ALTER TABLE modules DROP COLUMN kept; ALTER TABLE modules DROP COLUMN unused_since; \
                     DROP TABLE workflow_counts; DROP TABLE workflow_count_changes; \
                     DROP INDEX workflows_finished; DROP INDEX workflows_module; \
                     ALTER TABLE workflows DROP COLUMN paused; DROP TABLE schedules; \
                     ALTER TABLE workflows DROP COLUMN run; DROP TABLE module_names; \
                     ALTER TABLE workflows DROP COLUMN trace; \
                     DROP TRIGGER workflow_counts_started ON workflows; \
                     DROP TRIGGER workflow_counts_changed ON workflows; \
                     DROP TRIGGER workflow_counts_removed ON workflows; \
                     DROP FUNCTION workflow_counts_add; DROP FUNCTION workflow_counts_move; \
                     DROP INDEX tasks_call; ALTER TABLE tasks DROP COLUMN workflow, \
                     DROP COLUMN tag, DROP COLUMN queued_at, DROP COLUMN traceparent; \
                     INSERT INTO workflows (num, id, module, module_name, entry, input, \
                     started, root) VALUES (4, 'w4', 'm', 'm', 'main', '', 0, 4), \
                     (5, 'w5', 'm', 'm', 'other', '', 0, 5); \
                     UPDATE meta SET value = 5 WHERE key = 'schema';",
                );
            }
            other => panic!("no store to migrate at {other:?}"),
        }
        let mut store = open(&location);
        let everything = everything();
        let want = |running, completed, failed, cancelled| StateCounts {
            running,
            completed,
            failed,
            cancelled,
            ..Default::default()
        };
        assert_eq!(
            store.counts(&everything).unwrap(),
            want(3, 1, 0, 1),
            "{location:?}"
        );
        store.commit(&[start(6), end(1, b"r")]).unwrap();
        assert_eq!(
            store.counts(&everything).unwrap(),
            want(3, 2, 0, 1),
            "{location:?}"
        );
        let other = Filter {
            entry: Some("other".into()),
            ..everything
        };
        assert_eq!(store.counts(&other).unwrap(), want(1, 0, 0, 0));
    }
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
    // Started, stepped and failed in one batch, beside another's start: each as it was asked.
    store
        .commit(&[
            start(4),
            snapshot(4, 1),
            step(4, 1, vec![]),
            Op::End {
                num: 4,
                ending: Ending::Failed {
                    kind: "trap".into(),
                    message: "out of bounds".into(),
                },
                at: 100,
            },
            start(5),
        ])
        .unwrap();
    let four = store.workflow("w4").unwrap().unwrap();
    assert_eq!(four.state, State::Failed);
    assert_eq!(
        four.ending,
        Some(Ending::Failed {
            kind: "trap".into(),
            message: "out of bounds".into()
        })
    );
    assert_eq!((four.finished, four.steps), (Some(100), 1));
    assert_eq!(store.snapshot(4).unwrap(), None);
    assert_eq!(store.workflow("w5").unwrap().unwrap().state, State::Running);
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

#[test]
fn a_page_by_id_prefix_holds_exactly_the_workflows_whose_ids_start_so() {
    for location in locations("prefix") {
        let mut store = open(&location);
        let named = |num: u64, id: &str| {
            Op::Start(NewWorkflow {
                num,
                id: id.into(),
                parent: None,
                module: "m".into(),
                module_name: "m".into(),
                entry: "main".into(),
                input: Vec::new(),
                started: num,
                trace: None,
            })
        };
        let mut ops = vec![Op::Module {
            hash: "m".into(),
            bytes: vec![0, 97, 115, 109].into(),
        }];
        // Many ids under one prefix (a page of them is read in order), a few under others (read
        // from the id index), and ids that sort right beside a prefix's range.
        let mut num = 0;
        for n in 0..5_100 {
            num += 1;
            ops.push(named(num, &format!("order-{n:05}")));
            if n % 1_000 == 0 {
                for id in [
                    format!("refund-{n}"),
                    format!("order.{n}"),
                    format!("orde{n}"),
                    format!("é\u{10FFFF}-{n}"),
                    format!("é\u{10FFFF}\u{10FFFF}{n}"),
                    format!("ê-{n}"),
                ] {
                    num += 1;
                    ops.push(named(num, &id));
                }
            }
        }
        store.commit(&ops).unwrap();
        let page = |store: &mut Box<dyn Store>, prefix: &str, after: u64, limit: usize| {
            let filter = Filter {
                prefix: Some(prefix.into()),
                ..everything()
            };
            store
                .page(&filter, after, limit)
                .unwrap()
                .into_iter()
                .map(|w| (w.start.num, w.start.id))
                .collect::<Vec<_>>()
        };
        let all_of = |store: &mut Box<dyn Store>, prefix: &str| {
            let mut ids = Vec::new();
            let mut after = 0;
            loop {
                let rows = page(store, prefix, after, 1_000);
                let Some(&(last, _)) = rows.last() else { break };
                after = last;
                ids.extend(rows.into_iter().map(|(_, id)| id));
            }
            ids
        };
        let orders = all_of(&mut store, "order-");
        assert_eq!(orders.len(), 5_100, "{location:?}");
        assert!(orders.iter().all(|id| id.starts_with("order-")));
        assert_eq!(orders[4_000], "order-04000");
        let first = page(&mut store, "order-", 0, 3);
        assert_eq!(
            first.iter().map(|(_, id)| id.as_str()).collect::<Vec<_>>(),
            ["order-00000", "order-00001", "order-00002"],
            "{location:?}"
        );
        assert_eq!(
            all_of(&mut store, "refund-"),
            [
                "refund-0",
                "refund-1000",
                "refund-2000",
                "refund-3000",
                "refund-4000",
                "refund-5000"
            ],
            "{location:?}"
        );
        assert_eq!(all_of(&mut store, "order").len(), 5_100 + 6, "{location:?}");
        assert_eq!(all_of(&mut store, "é\u{10FFFF}").len(), 12, "{location:?}");
        assert_eq!(
            all_of(&mut store, "é\u{10FFFF}\u{10FFFF}").len(),
            6,
            "{location:?}"
        );
        assert_eq!(all_of(&mut store, "é").len(), 12, "{location:?}");
        assert_eq!(all_of(&mut store, "nothing").len(), 0, "{location:?}");
        assert_eq!(all_of(&mut store, "").len(), num as usize, "{location:?}");
    }
}

/// Two writers at once (two hosts' connections to one PostgreSQL store; on SQLite, whose file
/// takes one writer, one after the other) start and end workflows of two entry points, in
/// batches of both orders: the counts kept by the store's triggers come out as a count of the
/// workflows themselves does, and on PostgreSQL a read folds the changes into the counts.
#[test]
fn counts_kept_while_two_writers_commit_at_once_match_the_workflows() {
    for location in locations("counts-race") {
        let mut first = open(&location);
        first
            .commit(&[Op::Module {
                hash: "m".into(),
                bytes: vec![0, 97, 115, 109].into(),
            }])
            .unwrap();
        drop(first);
        let concurrent = matches!(location, Location::Postgres(_));
        let write = |writer: u64, location: Location| {
            move || {
                let mut store = open(&location);
                for batch in 0..50u64 {
                    let base = 1 + writer * 100_000 + batch * 20;
                    let mut nums: Vec<u64> = (base..base + 20).collect();
                    if (writer + batch) % 2 == 1 {
                        nums.reverse();
                    }
                    let starts: Vec<Op> = nums
                        .iter()
                        .map(|&n| {
                            let mut op = start(n);
                            if let Op::Start(w) = &mut op {
                                w.entry = if n % 3 == 0 { "a" } else { "b" }.into();
                            }
                            op
                        })
                        .collect();
                    store.commit(&starts).unwrap();
                    let ends: Vec<Op> = nums
                        .iter()
                        .filter(|&&n| n % 4 != 0)
                        .map(|&n| match n % 4 {
                            1 => end(n, b"r"),
                            kind => Op::End {
                                num: n,
                                ending: Ending::Failed {
                                    kind: if kind == 2 { "trap" } else { "cancelled" }.into(),
                                    message: "no".into(),
                                },
                                at: 99,
                            },
                        })
                        .collect();
                    store.commit(&ends).unwrap();
                }
            }
        };
        if concurrent {
            let writers: Vec<_> = (0..2u64)
                .map(|writer| std::thread::spawn(write(writer, location.clone())))
                .collect();
            for writer in writers {
                writer.join().unwrap();
            }
        } else {
            for writer in 0..2u64 {
                write(writer, location.clone())();
            }
        }
        let mut store = open(&location);
        let kept = store.counts(&everything()).unwrap();
        assert_eq!(
            kept,
            StateCounts {
                running: 500,
                completed: 500,
                failed: 500,
                cancelled: 500,
                ..Default::default()
            },
            "{location:?}"
        );
        let read = store
            .counts(&Filter {
                prefix: Some(String::new()),
                ..everything()
            })
            .unwrap();
        assert_eq!(kept, read, "{location:?}");
        let of_a = store
            .counts(&Filter {
                entry: Some("a".into()),
                ..everything()
            })
            .unwrap();
        let of_a_read = store
            .counts(&Filter {
                entry: Some("a".into()),
                prefix: Some(String::new()),
                ..everything()
            })
            .unwrap();
        assert_eq!(of_a, of_a_read, "{location:?}");
        if let Location::Postgres(url) = &location {
            let left =
                Postgres::shared().psql(url, "SELECT count(*) FROM wfhost.workflow_count_changes");
            assert_eq!(left.trim(), "0", "the read folded the changes");
        }
    }
}

#[test]
fn a_prune_removes_exactly_the_finished_trees_before_its_cutoff_with_all_of_theirs() {
    for location in locations("prune") {
        pruned(&location);
    }
}

fn pruned(location: &Location) {
    let mut store = open(location);
    let workflow = |num: u64, parent: Option<u64>, module: &str| {
        Op::Start(NewWorkflow {
            num,
            id: format!("w{num}"),
            parent,
            module: module.into(),
            module_name: module.into(),
            entry: "main".into(),
            input: Vec::new(),
            started: num,
            trace: None,
        })
    };
    let ended = |num: u64, at: u64| Op::End {
        num,
        ending: Ending::Done(b"r".to_vec()),
        at,
    };
    let failed = |num: u64, kind: &str, at: u64| Op::End {
        num,
        ending: Ending::Failed {
            kind: kind.into(),
            message: "no".into(),
        },
        at,
    };
    let module = |hash: &str| Op::Module {
        hash: hash.into(),
        bytes: vec![0, 97, 115, 109].into(),
    };
    store
        .commit(&[
            module("m"),
            module("only-tree-1"),
            // Tree 1, all finished before the cutoff (300): goes, with its own module.
            workflow(1, None, "only-tree-1"),
            workflow(2, Some(1), "only-tree-1"),
            workflow(3, Some(2), "m"),
            // Tree 4: finished, but its child runs: left.
            workflow(4, None, "m"),
            workflow(5, Some(4), "m"),
            // 6 finished after the cutoff; 7 cancelled before it; 8 runs.
            workflow(6, None, "m"),
            workflow(7, None, "m"),
            workflow(8, None, "m"),
            step(1, 1, vec![]),
            step(2, 1, vec![]),
            step(6, 1, vec![]),
            step(8, 1, vec![]),
            snapshot(5, 1),
            snapshot(8, 1),
            // Unread by 1; sent by 2 to 8, waiting; sent by 3 and refused.
            message(10, 1),
            Op::Message(NewMessage {
                id: 11,
                receiver: 8,
                sender: 2,
                payload: vec![1],
                local: true,
            }),
            Op::Message(NewMessage {
                id: 12,
                receiver: 6,
                sender: 3,
                payload: vec![2],
                local: true,
            }),
            Op::HostMessage(HostMessage {
                num: 1,
                tag: 1,
                at: 1,
                payload: vec![3],
            }),
            Op::HostMessage(HostMessage {
                num: 8,
                tag: 1,
                at: 1,
                payload: vec![4],
            }),
        ])
        .unwrap();
    store
        .commit(&[
            Op::Refused {
                id: 12,
                error: "full".into(),
            },
            failed(3, "trap", 100),
            ended(2, 110),
            ended(1, 120),
            ended(4, 130),
            ended(6, 500),
            failed(7, "cancelled", 140),
        ])
        .unwrap();
    let filter = |state: Option<State>, cancelled: Option<bool>| PruneFilter {
        finished_before: 300,
        state,
        cancelled,
    };
    let candidates = |store: &mut Box<dyn Store>, filter: &PruneFilter| {
        store
            .prunable(filter, (0, 0), 100)
            .unwrap()
            .iter()
            .map(|c| (c.root, c.finished, c.workflows, c.unfinished))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        candidates(&mut store, &filter(None, None)),
        [(1, 120, 3, false), (4, 130, 2, true), (7, 140, 1, false)],
        "{location:?}"
    );
    // Pages of candidates follow the cursor.
    assert_eq!(
        store
            .prunable(&filter(None, None), (120, 1), 1)
            .unwrap()
            .iter()
            .map(|c| c.root)
            .collect::<Vec<_>>(),
        [4],
        "{location:?}"
    );
    // Only the completed ones: 7 (cancelled) is not one.
    assert_eq!(
        candidates(&mut store, &filter(Some(State::Done), None)),
        [(1, 120, 3, false), (4, 130, 2, true)],
        "{location:?}"
    );
    assert_eq!(
        candidates(&mut store, &filter(Some(State::Failed), Some(true))),
        [(7, 140, 1, false)],
        "{location:?}"
    );
    // A root whose tree still runs is left even when asked for.
    store
        .commit(&[Op::Prune {
            roots: vec![1, 4, 7],
            // Every module stored so far may go, at once.
            kept_before: i64::MAX as u64,
            marked_before: i64::MAX as u64,
        }])
        .unwrap();
    let ids: Vec<String> = store
        .workflows(false)
        .unwrap()
        .iter()
        .map(|w| w.start.id.clone())
        .collect();
    assert_eq!(ids, ["w4", "w5", "w6", "w8"], "{location:?}");
    for num in [1, 2, 3] {
        assert_eq!(seqs(&mut *store, num, 0), Vec::<u64>::new(), "{location:?}");
        assert!(store.snapshot(num).unwrap().is_none());
        assert!(store.host_messages(num, 0, 10).unwrap().is_empty());
    }
    assert_eq!(seqs(&mut *store, 6, 0), [1], "{location:?}");
    assert_eq!(seqs(&mut *store, 8, 0), [1], "{location:?}");
    assert!(store.snapshot(5).unwrap().is_some());
    assert_eq!(store.host_messages(8, 0, 10).unwrap().len(), 1);
    // Message 10 (to 1) and 12 (refused, from 3) went; 11 (to 8, running) waits still; what
    // 1 sent the host went, what 8 sent stays.
    assert_eq!(waiting(&mut *store), [11], "{location:?}");
    assert_eq!(
        rows(location, "SELECT id FROM messages"),
        "11",
        "{location:?}"
    );
    assert_eq!(
        rows(location, "SELECT num FROM outbox"),
        "8",
        "{location:?}"
    );
    assert!(
        store.module("only-tree-1").unwrap().is_none(),
        "{location:?}"
    );
    assert!(store.module("m").unwrap().is_some(), "{location:?}");
    // The counts the store keeps followed: 5 and 8 run, 4 and 6 completed.
    let kept = store.counts(&everything()).unwrap();
    let want = StateCounts {
        running: 2,
        completed: 2,
        failed: 0,
        cancelled: 0,
        ..Default::default()
    };
    assert_eq!(kept, want, "{location:?}");
    assert_eq!(
        candidates(&mut store, &filter(None, None)),
        [(4, 130, 2, true)]
    );
    if matches!(location, Location::Sqlite(_)) {
        // A new SQLite file vacuums incrementally: what a prune frees goes back to the disk.
        assert_eq!(rows(location, "PRAGMA auto_vacuum"), "2");
    }
}

/// What `query` (one column) reads from the store's own tables, a row a line.
fn rows(location: &Location, query: &str) -> String {
    match location {
        Location::Sqlite(path) => {
            let conn = rusqlite::Connection::open(path).unwrap();
            let mut statement = conn.prepare(query).unwrap();
            let values: Vec<String> = statement
                .query_map([], |row| row.get::<_, i64>(0))
                .unwrap()
                .map(|v| v.unwrap().to_string())
                .collect();
            values.join("\n")
        }
        Location::Postgres(url) => Postgres::shared()
            .psql(url, &format!("SET search_path TO wfhost; {query}"))
            .trim()
            .to_string(),
        other => panic!("no tables at {other:?}"),
    }
}

#[test]
fn module_names_take_versions_and_a_prune_keeps_each_names_latest() {
    for location in locations("module-names") {
        module_names(&location);
    }
}

/// Module `hash` named `name`, as a host names it on this store.
fn name(location: &Location, store: &mut dyn Store, name: &str, hash: &str) {
    match location {
        Location::Postgres(url) => PgStore::open_existing(url)
            .unwrap()
            .submit_module_name(name, hash)
            .unwrap(),
        _ => {
            store
                .commit(&[Op::NameModule {
                    name: name.into(),
                    hash: hash.into(),
                    at: 5,
                }])
                .unwrap();
        }
    }
}

fn module_names(location: &Location) {
    let mut store = open(location);
    let module = |hash: &str| Op::Module {
        hash: hash.into(),
        bytes: vec![0, 97, 115, 109].into(),
    };
    store
        .commit(&[module("a"), module("b"), module("c")])
        .unwrap();
    // `a` twice in a row is one version; `b` is the next.
    for (n, hash) in [
        ("orders", "a"),
        ("orders", "a"),
        ("orders", "b"),
        ("other", "c"),
    ] {
        name(location, &mut *store, n, hash);
    }
    let versions = |store: &mut dyn Store| -> Vec<(String, u64, String)> {
        store
            .module_names()
            .unwrap()
            .into_iter()
            .map(
                |ModuleName {
                     name,
                     version,
                     hash,
                     ..
                 }| (name, version, hash),
            )
            .collect()
    };
    let want = |rows: &[(&str, u64, &str)]| -> Vec<(String, u64, String)> {
        rows.iter()
            .map(|(n, v, h)| (n.to_string(), *v, h.to_string()))
            .collect()
    };
    assert_eq!(
        versions(&mut *store),
        want(&[("orders", 1, "a"), ("orders", 2, "b"), ("other", 1, "c")]),
        "{location:?}"
    );
    let latest = store.module_named("orders", None).unwrap().unwrap();
    assert_eq!((latest.version, latest.hash.as_str()), (2, "b"));
    let first = store.module_named("orders", Some(1)).unwrap().unwrap();
    assert_eq!(first.hash, "a");
    assert!(store.module_named("orders", Some(3)).unwrap().is_none());
    assert!(store.module_named("nobody", None).unwrap().is_none());

    // Workflows of each module end and are pruned, with everything stored so far let go: the
    // latest version of each name stays, `orders@1` goes with its module.
    let mut ops = Vec::new();
    for (num, hash) in [(1, "a"), (2, "b"), (3, "c")] {
        let Op::Start(mut workflow) = start(num) else {
            unreachable!()
        };
        workflow.module = hash.into();
        ops.push(Op::Start(workflow));
        ops.push(end(num, b"r"));
    }
    store.commit(&ops).unwrap();
    store
        .commit(&[Op::Prune {
            roots: vec![1, 2, 3],
            kept_before: i64::MAX as u64,
            marked_before: i64::MAX as u64,
        }])
        .unwrap();
    assert!(store.module("a").unwrap().is_none(), "{location:?}");
    for kept in ["b", "c"] {
        assert!(store.module(kept).unwrap().is_some(), "{location:?} {kept}");
    }
    assert_eq!(
        versions(&mut *store),
        want(&[("orders", 2, "b"), ("other", 1, "c")]),
        "{location:?}"
    );
    // Named again after the prune, `a` is the next version: versions never go back.
    name(location, &mut *store, "orders", "a");
    assert_eq!(
        store.module_named("orders", None).unwrap().unwrap().version,
        3
    );
}
