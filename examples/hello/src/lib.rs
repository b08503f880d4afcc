//! Greetings: the smallest wfhost workflows.
//!
//! `wfhost run examples/hello greet --input '"world"'` prints `"Hello, world!"`.

use wfguest::{Ctx, Error};

/// Greets `name`.
pub async fn greet(_ctx: Ctx, name: String) -> Result<String, Error> {
    Ok(format!("Hello, {name}!"))
}

/// Greets everyone in `names`, logging each greeting.
pub async fn greet_all(ctx: Ctx, names: Vec<String>) -> Result<Vec<String>, Error> {
    let mut greetings = Vec::with_capacity(names.len());
    for name in names {
        let greeting = format!("Hello, {name}!");
        ctx.log_with(wfguest::Level::Info, "greeted", &[("name", &name)]);
        greetings.push(greeting);
    }
    Ok(greetings)
}

wfguest::entry_points!(greet, greet_all);
