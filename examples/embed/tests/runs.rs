//! The embed example, run as a user would, against the order module the test build made.

use std::process::Command;

#[test]
fn the_embed_example_runs_the_orders_through_its_inventory() {
    let output = Command::new(env!("CARGO_BIN_EXE_embed"))
        .arg(wfhost_test_programs::ORDER)
        .output()
        .expect("run the embed example");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let expected = [
        r#"order o-1: {"order":"o-1","status":"completed","log":["reserve_stock: reserved 2 (1 left)","charge_payment: charged 4999 cents","ship_order: shipped o-1"]}"#,
        r#"order o-2: {"order":"o-2","status":"compensated","log":["reserve_stock: failed"]}"#,
        "from <7>: holding h-1",
        "hold h-1: confirmed",
        r#"hold h-2: "released""#,
    ];
    assert_eq!(stdout.lines().collect::<Vec<_>>(), expected);
}
