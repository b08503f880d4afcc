// Embedding wfhost: a Rust application that registers a native `inventory.reserve` function and
// runs the order workflows (examples/order) that call it. Run it with `cargo run -p embed`, or
// `cargo run -p embed -- path/to/order.wasm` to skip building the module.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use wfhost::{Grants, Host, Payload};

/// What the order workflow asks the inventory for.
#[derive(Deserialize)]
struct Reservation {
    sku: String,
    quantity: u32,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The workflow module: given, or built from the order example.
    let module: PathBuf = match std::env::args_os().nth(1) {
        Some(path) => path.into(),
        None => {
            // `cargo run` names the package's directory; an installed binary falls back to
            // where it was built.
            let package = std::env::var_os("CARGO_MANIFEST_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
            let order = package.join("../order");
            wfhost_cli::build::build_workflow(&order, true)?
        }
    };

    // The application's own state, reached by workflows only through the function.
    let stock = Mutex::new(HashMap::from([("kettle".to_string(), 3u32)]));
    let host = Host::builder()
        .workers(2)
        .function("inventory.reserve", move |wanted: Reservation| {
            let mut stock = stock.lock().map_err(|_| "the stock is unavailable")?;
            let left = stock.get_mut(&wanted.sku).ok_or("no such item")?;
            if *left < wanted.quantity {
                return Err("not enough stock");
            }
            *left -= wanted.quantity;
            Ok(format!("{left} left"))
        })
        .build()?;
    // A module may call only the host functions it is granted.
    host.load_module_with(
        "order",
        &module,
        Grants::default().allow_function("inventory.reserve"),
    )?;

    // Two orders: the inventory can serve the first; the second finds too little stock, so the
    // saga stops at its first step and has nothing to compensate.
    for (id, quantity) in [("o-1", 2), ("o-2", 5)] {
        let order =
            json!({ "id": id, "sku": "kettle", "quantity": quantity, "amount_cents": 4999 });
        let run = host.spawn("order", "place_order", Payload::to_json(&order)?)?;
        println!("order {id}: {}", text(&run.wait()?));
    }

    // A held order: it tells the application the hold is in place (a message to the host), and
    // a message from the application confirms it. Its result decodes as a `String`.
    let hold = json!({ "id": "h-1", "sku": "kettle", "quantity": 1, "amount_cents": 4999 });
    let held = host
        .spawn("order", "hold_order", Payload::to_json(&hold)?)?
        .decoded::<String>();
    if let Some(news) = held.recv_message() {
        println!("from {}: {}", news.from, news.decode::<String>()?);
    }
    host.send(held.pid(), Payload::to_json("confirm")?)?;
    println!("hold h-1: {}", held.wait()?);

    // Another, cancelled: the workflow sees the cancel and releases the hold.
    let held = host.spawn("order", "hold_order", Payload::to_json(&hold)?)?;
    host.cancel(held.pid())?;
    println!("hold h-2: {}", text(&held.wait()?));

    host.shutdown(Duration::from_secs(5));
    Ok(())
}

/// A JSON result as text.
fn text(payload: &Payload) -> String {
    String::from_utf8_lossy(&payload.bytes).into_owned()
}
