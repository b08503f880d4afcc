//! The `Client`: a store of 100,000 workflows lists in pages by cursor, filtered by status, entry
//! point and id prefix; status, result and history read what a host wrote; a SQLite file takes
//! no client starts, messages or cancels, and says what to do instead.

use std::time::Duration;

use wfhost::__testing::{Ending, NewWorkflow, Op, Open as _, SyncMode};
use wfhost::store::Location;
use wfhost::{Client, ErrorKind, Host, ListQuery, Payload, WorkflowState};

use wfhost_test_programs::PROBE;

use super::common::tempdir;

/// Workflow `num` as a start: ids `order-00001`..., every third of entry `refund`.
fn start(num: u64) -> Op {
    Op::Start(NewWorkflow {
        num,
        id: format!("order-{num:06}"),
        parent: None,
        module: "ab".repeat(32),
        module_name: "probe".into(),
        entry: if num.is_multiple_of(3) {
            "refund"
        } else {
            "order"
        }
        .into(),
        input: postcard::to_allocvec(&Payload::empty()).unwrap(),
        started: 1_000 + num,
        trace: None,
    })
}

#[test]
fn a_store_of_100000_workflows_lists_in_pages_by_cursor() {
    let path = tempdir("client-pages").join("wf.db");
    let location = Location::Sqlite(path.clone());
    {
        let mut store = location.open(SyncMode::Normal).unwrap();
        let ops: Vec<Op> = (1..=100_000).map(start).collect();
        store.commit(&ops).unwrap();
        // Every tenth ended: done, or (every twentieth) cancelled.
        let ends: Vec<Op> = (1..=100_000u64)
            .filter(|n| n.is_multiple_of(10))
            .map(|num| Op::End {
                num,
                ending: if num.is_multiple_of(20) {
                    Ending::Failed {
                        kind: "cancelled".into(),
                        message: "asked".into(),
                    }
                } else {
                    Ending::Done(postcard::to_allocvec(&Payload::empty()).unwrap())
                },
                at: 5_000,
            })
            .collect();
        store.commit(&ends).unwrap();
    }
    let client = Client::open(&path);
    let first = client.list(&ListQuery::new().limit(10)).unwrap();
    let ids: Vec<&str> = first.items.iter().map(|w| w.id.as_str()).collect();
    assert_eq!(
        ids,
        (1..=10)
            .map(|n| format!("order-{n:06}"))
            .collect::<Vec<_>>()
    );
    let next = first.next.clone().expect("more follow");
    let second = client
        .list(&ListQuery::new().limit(10).after(next))
        .unwrap();
    assert_eq!(second.items.len(), 10);
    assert_eq!(second.items[0].id, "order-000011");
    assert_eq!(second.items[9].id, "order-000020");
    assert_eq!(second.items[9].state, WorkflowState::Cancelled);
    assert_eq!(second.items[9].finished, Some(5_000));
    assert_eq!(second.items[8].state, WorkflowState::Running);
    // Filtered: cancelled ones (every twentieth), of one entry point, by id prefix.
    let cancelled = client
        .list(
            &ListQuery::new()
                .state(WorkflowState::Cancelled)
                .limit(10_000),
        )
        .unwrap();
    assert_eq!(cancelled.items.len(), 5_000);
    assert_eq!(cancelled.next, None);
    let completed = client
        .list(
            &ListQuery::new()
                .state(WorkflowState::Completed)
                .limit(10_000),
        )
        .unwrap();
    assert_eq!(completed.items.len(), 5_000);
    assert!(completed.items.iter().all(|w| w.number % 20 == 10));
    let refunds = client
        .list(
            &ListQuery::new()
                .entry("refund")
                .prefix("order-0001")
                .limit(1_000),
        )
        .unwrap();
    // order-000100 to order-000199: 33 of them are multiples of 3.
    assert_eq!(refunds.items.len(), 33);
    assert_eq!(refunds.items[0].id, "order-000102");
    assert_eq!(refunds.next, None);
    // Paging to the end visits every workflow once.
    let (mut seen, mut cursor, mut pages) = (0, None::<String>, 0);
    loop {
        let mut query = ListQuery::new().limit(10_000);
        if let Some(c) = cursor.take() {
            query = query.after(c);
        }
        let page = client.list(&query).unwrap();
        seen += page.items.len();
        pages += 1;
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!((seen, pages), (100_000, 10));
    // A cursor that is not one, and a page too large, say so.
    let bad = client
        .list(&ListQuery::new().after("nonsense"))
        .unwrap_err();
    assert_eq!(bad.kind(), ErrorKind::InvalidInput);
    assert!(bad.message().contains("is not a cursor"), "{bad}");
    let big = client.list(&ListQuery::new().limit(10_001)).unwrap_err();
    assert_eq!(big.kind(), ErrorKind::InvalidInput);
    // A SQLite file takes no client work, and the error says what to do.
    let refused = client.send("order-000001", &Payload::empty()).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Config);
    assert!(refused
        .message()
        .contains("client commands need a store hosts share"));
    let unknown = client.status("nobody").unwrap_err();
    assert_eq!(unknown.kind(), ErrorKind::UnknownWorkflow);
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
fn a_client_reads_what_a_host_wrote_beside_it() {
    let path = tempdir("client-reads").join("wf.db");
    let host = Host::builder()
        .workers(1)
        .store(&path, SyncMode::Normal)
        .build()
        .unwrap();
    host.load_module("probe", PROBE).unwrap();
    let run = host
        .start("echoed", "probe", "echo", Payload::to_json(&7).unwrap())
        .unwrap();
    run.wait().unwrap();
    let client = Client::open(&path);
    let status = client
        .result("echoed", Some(Duration::from_secs(30)))
        .unwrap();
    assert_eq!(status.state, WorkflowState::Completed);
    assert_eq!(status.result, Some(Payload::to_json(&7).unwrap()));
    assert_eq!(status.entry, "echo");
    let history = client.history("echoed", None, 1).unwrap();
    assert_eq!(history.items.len(), 1);
    assert_eq!(history.items[0].seq, 1);
    let all = client.history("echoed", None, 1_000).unwrap();
    assert_eq!(all.items.len() as u64, status.steps);
    assert_eq!(all.next, None);
    if status.steps > 1 {
        let rest = client
            .history("echoed", history.next.as_deref(), 1_000)
            .unwrap();
        assert_eq!(rest.items[0].seq, 2);
    }
    host.shutdown(Duration::from_secs(1));
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
fn a_page_cut_at_its_byte_budget_says_where_the_next_begins() {
    let path = tempdir("client-budget").join("wf.db");
    let location = Location::Sqlite(path.clone());
    // Twenty workflows with 4 MiB inputs: 80 MiB, past a page's 64 MiB.
    {
        let mut store = location.open(SyncMode::Normal).unwrap();
        let input = postcard::to_allocvec(&Payload::opaque(vec![7; 4 << 20])).unwrap();
        for num in 1..=20 {
            let Op::Start(mut workflow) = start(num) else {
                unreachable!()
            };
            workflow.input = input.clone();
            store.commit(&[Op::Start(workflow)]).unwrap();
        }
    }
    let client = Client::open(&path);
    let first = client.list(&ListQuery::new().limit(100)).unwrap();
    assert!(first.items.len() < 20, "{}", first.items.len());
    assert!(!first.items.is_empty());
    let next = first
        .next
        .clone()
        .expect("a cut page says where the next begins");
    let second = client
        .list(&ListQuery::new().limit(100).after(next))
        .unwrap();
    assert_eq!(first.items.len() + second.items.len(), 20);
    assert_eq!(second.next, None);
    let numbers: Vec<u64> = first
        .items
        .iter()
        .chain(&second.items)
        .map(|w| w.number)
        .collect();
    assert_eq!(numbers, (1..=20).collect::<Vec<u64>>());
}
