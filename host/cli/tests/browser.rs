//! The web UI in a real browser: Chromium (Debian's `chromium` and `chromium-driver`, which
//! `.ci/run` installs) driven over WebDriver against a real `wfhost serve --http` with a token.
//! A wrong token is refused and the right one kept; the list follows a workflow live to
//! `completed`, filters and pages; a workflow's page shows as many steps as its journal has, says
//! what the workflow waits for, sends it a message and cancels it. Each page's screenshot is
//! saved under the target directory (`ui-screenshots/`).

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::chromium::Driver;
use common::http::{put_probe, start_request, HttpServer};
use common::PATIENCE;
use fantoccini::{Client, Locator};
use serde_json::json;
use wfhost_client::wire::HistoryParams;

const TOKEN: &str = "ui-test-token";

/// Waits until `check` says so; what it last saw goes into the failure.
async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, String>>,
{
    let started = Instant::now();
    let mut last = String::new();
    while started.elapsed() < PATIENCE {
        match check().await {
            Ok(true) => return,
            Ok(false) => {}
            Err(seen) => last = seen,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}: not within {PATIENCE:?} (last: {last})");
}

async fn text_of(client: &Client, css: &str) -> Result<String, String> {
    let element = client
        .find(Locator::Css(css))
        .await
        .map_err(|e| format!("no {css}: {e}"))?;
    element.text().await.map_err(|e| e.to_string())
}

async fn count(client: &Client, css: &str) -> usize {
    client
        .find_all(Locator::Css(css))
        .await
        .map_or(0, |all| all.len())
}

fn screenshots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn screenshot(client: &Client, name: &str) {
    let png = client.screenshot().await.unwrap();
    std::fs::write(screenshots().join(format!("{name}.png")), png).unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn the_ui_in_a_real_browser() {
    let dir = common::tempdir("browser", "ui");
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let store = dir.join("wf.db");
    let server = HttpServer::start(
        &dir,
        store.to_str().unwrap(),
        &[
            "--token-file",
            token_file.to_str().unwrap(),
            "--worker-function",
            "payments.charge",
        ],
    );
    let api = server.client().with_token(TOKEN);
    let module = put_probe(&api);
    for n in 0..55 {
        // echo-07's input looks like a child's answer: the page reads fields, not text.
        let input = match n {
            7 => json!({"parent": 424242, "number": 7}),
            n => json!(n),
        };
        api.start(&start_request(
            &format!("echo-{n:02}"),
            &module,
            "echo",
            input,
        ))
        .unwrap();
    }
    for id in ["waiter-api", "waiter-page", "waiter-cancel"] {
        api.start(&start_request(id, &module, "wait_message", json!(600_000)))
            .unwrap();
    }
    // A running tree: a parent joining a child that joins a grandchild waiting for a message.
    api.start(&start_request(
        "tree-live",
        &module,
        "supervise",
        json!([null, "supervise", [null, "wait_message", 600_000]]),
    ))
    .unwrap();
    // A chain three deep below `nest`, and a history longer than a page of the timeline.
    api.start(&start_request("nest", &module, "nest", json!(3)))
        .unwrap();
    let countdown = api
        .put_module(&std::fs::read(wfhost_test_programs::COUNTDOWN).unwrap())
        .unwrap()
        .0
        .hash;
    api.start(&start_request(
        "long",
        &countdown,
        "countdown",
        json!({"from": 600, "interval_ms": 0}),
    ))
    .unwrap();
    for n in 0..55 {
        api.result(&format!("echo-{n:02}"), Some(PATIENCE)).unwrap();
    }
    for id in ["nest", "long"] {
        api.result(id, Some(PATIENCE)).unwrap();
    }
    let driver = Driver::start();
    let client = driver.browser().await;
    let base = format!("http://{}", server.addr());

    // A wrong token is refused, and says so; the right one opens the list.
    client.goto(&format!("{base}/")).await.unwrap();
    let token = client
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("#token-input"))
        .await
        .unwrap();
    until("the token dialog shows", || async {
        Ok(client
            .find(Locator::Css("#token-dialog[open]"))
            .await
            .is_ok())
    })
    .await;
    // Esc does not close it: nothing could be shown without a token.
    token
        .send_keys(&char::from(fantoccini::key::Key::Escape).to_string())
        .await
        .unwrap();
    until("the dialog stays (or comes back) after Esc", || async {
        Ok(client
            .find(Locator::Css("#token-dialog[open]"))
            .await
            .is_ok())
    })
    .await;
    token.send_keys("not-the-token").await.unwrap();
    client
        .find(Locator::Css("#token-ok"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until("a wrong token is refused", || async {
        let why = text_of(&client, "#token-why").await?;
        Ok(why.contains("refused that token"))
    })
    .await;
    screenshot(&client, "token-refused").await;
    let token = client.find(Locator::Css("#token-input")).await.unwrap();
    token.send_keys(TOKEN).await.unwrap();
    client
        .find(Locator::Css("#token-ok"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until("the counts show", || async {
        let all = text_of(&client, "[data-count=all] b").await?;
        // 55 echoes, 3 waiters, `nest` and the three below it, `long`, and the running tree.
        Ok(all == "66")
    })
    .await;
    assert_eq!(
        text_of(&client, "[data-count=running] b").await.unwrap(),
        "6"
    );
    assert_eq!(
        text_of(&client, "[data-count=completed] b").await.unwrap(),
        "60"
    );

    // Pages of 50, oldest first.
    assert_eq!(count(&client, "table.workflows tbody tr").await, 50);
    screenshot(&client, "workflows").await;
    client
        .find(Locator::Css("#next-page"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until("the second page", || async {
        Ok(count(&client, "table.workflows tbody tr").await == 16)
    })
    .await;
    assert!(client
        .find(Locator::Css("tr[data-id=waiter-api]"))
        .await
        .is_ok());

    // Filters: the running ones.
    client.goto(&format!("{base}/#/")).await.unwrap();
    let status = client
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("#filters select[name=status]"))
        .await
        .unwrap();
    status.select_by_value("running").await.unwrap();
    client
        .find(Locator::Css("#filters button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until("only the running workflows", || async {
        Ok(count(&client, "table.workflows tbody tr").await == 6)
    })
    .await;
    client
        .goto(&format!("{base}/#/?prefix=waiter-"))
        .await
        .unwrap();
    until("the waiters, running", || async {
        let row = text_of(&client, "tr[data-id=waiter-api] [data-status]").await?;
        Ok(row == "running")
    })
    .await;

    // The list follows a workflow to its end without a reload.
    api.send(
        "waiter-api",
        &serde_json::value::to_raw_value(&json!("from the API")).unwrap(),
    )
    .unwrap();
    until("the list shows it completed", || async {
        let row = text_of(&client, "tr[data-id=waiter-api] [data-status]").await?;
        Ok(row == "completed")
    })
    .await;

    // A workflow's page: its timeline has as many steps as its journal.
    let steps = api
        .history("echo-07", &HistoryParams::default())
        .unwrap()
        .steps
        .len();
    client.goto(&format!("{base}/#/w/echo-07")).await.unwrap();
    until("the timeline", || async {
        Ok(count(&client, "#timeline > li[data-step]").await == steps)
    })
    .await;
    assert_eq!(
        text_of(&client, "#status [data-status]").await.unwrap(),
        "completed"
    );
    assert!(text_of(&client, "#result").await.unwrap().contains('7'));
    // A top-level workflow, whatever its input holds.
    let number = api.status("echo-07").unwrap().number;
    assert_eq!(
        text_of(&client, "#number").await.unwrap(),
        number.to_string()
    );

    // A long history shows its first 500 steps, and the next as the reader scrolls to them.
    let long_steps = api.status("long").unwrap().steps;
    assert_eq!(
        long_steps, 601,
        "countdown from 600: its first step, then one a tick"
    );
    client.goto(&format!("{base}/#/w/long")).await.unwrap();
    until("the first page of the timeline", || async {
        let shown = text_of(&client, "#step-count").await?;
        Ok(count(&client, "#timeline > li[data-step]").await == 500
            && shown == "(601 steps, the first 500 shown)")
    })
    .await;
    client
        .execute(
            "document.getElementById('more-steps-button').scrollIntoView()",
            vec![],
        )
        .await
        .unwrap();
    until("the rest of the timeline", || async {
        Ok(count(&client, "#timeline > li[data-step]").await == 601
            && text_of(&client, "#step-count").await? == "(601 steps)")
    })
    .await;

    // A workflow's children as a tree, each opening to its own.
    client.goto(&format!("{base}/#/w/nest")).await.unwrap();
    until("the child", || async {
        Ok(count(&client, "#children details").await == 1)
    })
    .await;
    for depth in 2..=3 {
        client
            .execute(
                "const all = document.querySelectorAll('#children details'); \
                 all[all.length - 1].open = true;",
                vec![],
            )
            .await
            .unwrap();
        until("a grandchild", || async {
            Ok(count(&client, "#children details").await == depth)
        })
        .await;
    }
    let deepest = text_of(&client, "#children details details details summary")
        .await
        .unwrap();
    assert!(deepest.contains("completed"), "{deepest}");
    screenshot(&client, "children").await;

    // A running tree keeps what the reader opened, at every depth, when it is redrawn: here
    // when the grandchild ends and the child with it.
    client.goto(&format!("{base}/#/w/tree-live")).await.unwrap();
    for depth in 1..=2 {
        until("a level of the running tree", || async {
            Ok(count(&client, "#children details").await == depth)
        })
        .await;
        client
            .execute(
                "const all = document.querySelectorAll('#children details'); \
                 all[all.length - 1].open = true;",
                vec![],
            )
            .await
            .unwrap();
    }
    until("the grandchild, running", || async {
        Ok(text_of(&client, "#children details details summary [data-status]").await? == "running")
    })
    .await;
    let grandchild = text_of(&client, "#children details details summary a")
        .await
        .unwrap();
    api.send(
        &grandchild,
        &serde_json::value::to_raw_value(&json!("done")).unwrap(),
    )
    .unwrap();
    api.result("tree-live", Some(PATIENCE)).unwrap();
    until("the tree redrawn, still open, with the ends", || async {
        let child = text_of(
            &client,
            "#children > ul > li > details > summary [data-status]",
        )
        .await?;
        let open = count(&client, "#children details[open] details[open]").await;
        let deepest = text_of(&client, "#children details details summary [data-status]").await?;
        Ok(child == "completed" && open == 1 && deepest == "completed")
    })
    .await;

    // Sending a message from the page reaches the workflow: its result says so. Not JSON is
    // refused before it is sent.
    client
        .goto(&format!("{base}/#/w/waiter-page"))
        .await
        .unwrap();
    until("it waits for a message and its timeout", || async {
        let waits = text_of(&client, "#waits").await?;
        Ok(waits.contains("a message") && waits.contains("a timer, firing"))
    })
    .await;
    // Paused from the page, it shows so, and the API says so; unpaused, it runs again.
    for (label, shown, paused) in [("Pause", "paused", true), ("Unpause", "running", false)] {
        let button = client.find(Locator::Css("#pause-button")).await.unwrap();
        assert_eq!(button.text().await.unwrap(), label);
        button.click().await.unwrap();
        until("the page shows it", || async {
            Ok(text_of(&client, "#status [data-status]").await? == shown)
        })
        .await;
        assert_eq!(api.status("waiter-page").unwrap().paused, paused);
    }
    // Upgraded from the page to another build of its module, which replays its journal.
    let rebuilt = dir.join("rebuilt.wasm");
    std::fs::write(&rebuilt, wfhost_test_programs::probe_version(2)).unwrap();
    let before = api.status("waiter-page").unwrap().module;
    client
        .find(Locator::Css("#upgrade-file"))
        .await
        .unwrap()
        .send_keys(rebuilt.to_str().unwrap())
        .await
        .unwrap();
    client
        .find(Locator::Css("#upgrade-button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until("the page says it was upgraded", || async {
        Ok(text_of(&client, "#upgrade-state")
            .await?
            .starts_with("Upgraded: "))
    })
    .await;
    let after = api.status("waiter-page").unwrap().module;
    assert!(after != before && after.len() == 64, "{before} -> {after}");
    let message = client.find(Locator::Css("#message")).await.unwrap();
    message.clear().await.unwrap();
    message.send_keys("{not json").await.unwrap();
    until("not JSON is refused", || async {
        let state = text_of(&client, "#send-state").await?;
        let disabled = client
            .find(Locator::Css("#send-button"))
            .await
            .map_err(|e| e.to_string())?
            .attr("disabled")
            .await
            .map_err(|e| e.to_string())?;
        Ok(state.starts_with("Not JSON") && disabled.is_some())
    })
    .await;
    message.clear().await.unwrap();
    message.send_keys("\"from the page\"").await.unwrap();
    client
        .find(Locator::Css("#send-button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until("its result shows the message", || async {
        let result = text_of(&client, "#result").await?;
        Ok(result.contains("from the page"))
    })
    .await;
    screenshot(&client, "workflow").await;
    assert_eq!(
        api.status("waiter-page").unwrap().status,
        "completed",
        "the page's message reached the workflow"
    );

    // Cancel from the page, after a confirmation.
    client
        .goto(&format!("{base}/#/w/waiter-cancel"))
        .await
        .unwrap();
    let cancel = client
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("#cancel-button:not([disabled])"))
        .await
        .unwrap();
    cancel.click().await.unwrap();
    client.accept_alert().await.unwrap();
    until("it shows cancelled", || async {
        let status = text_of(&client, "#status [data-status]").await?;
        Ok(status == "cancelled")
    })
    .await;
    assert_eq!(api.status("waiter-cancel").unwrap().status, "cancelled");

    // Reset from the page, after a confirmation: a new run goes on, the run before is linked.
    let reset = client
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("#reset-button:not([disabled])"))
        .await
        .unwrap();
    reset.click().await.unwrap();
    client.accept_alert().await.unwrap();
    until("it says what the reset did", || async {
        let state = text_of(&client, "#reset-state").await?;
        Ok(state.starts_with("Run 2 keeps") && state.contains("waiter-cancel/run-1"))
    })
    .await;
    let now = api.status("waiter-cancel").unwrap();
    assert_eq!((now.run, now.status.as_str()), (2, "running"));
    assert_eq!(
        api.status("waiter-cancel/run-1").unwrap().status,
        "cancelled"
    );

    // The hosts page, with the journal's figures from the metrics: this host committed.
    client.goto(&format!("{base}/#/hosts")).await.unwrap();
    until("the host and its commits", || async {
        let commits = text_of(&client, "[data-figure=commits]").await?;
        let rows = count(&client, "tr[data-host]").await;
        Ok(rows == 1 && commits.parse::<f64>().is_ok_and(|n| n >= 1.0))
    })
    .await;
    screenshot(&client, "hosts").await;

    // The modules page: a module deployed under a name shows its version.
    let probe = wfhost_test_programs::probe_version(1);
    let (named, _) = api.put_module_named(&probe, "shop").unwrap();
    client.goto(&format!("{base}/#/modules")).await.unwrap();
    until("the named module and its version", || async {
        let names = text_of(
            &client,
            &format!("tr[data-module=\"{}\"] [data-names]", named.hash),
        )
        .await?;
        Ok(names == "shop@1")
    })
    .await;

    // The workers page: the function served, and nobody polling for it.
    client.goto(&format!("{base}/#/workers")).await.unwrap();
    until("the worker function and its pollers", || async {
        let row = text_of(&client, "tr[data-function=\"payments.charge\"]").await?;
        Ok(row.contains("no worker polls for it"))
    })
    .await;
    assert_eq!(
        text_of(
            &client,
            "tr[data-function=\"payments.charge\"] [data-waiting]"
        )
        .await
        .unwrap(),
        "0"
    );

    // A phone's width: the list still reads (the wide columns give way).
    client.set_window_size(390, 844).await.unwrap();
    client
        .goto(&format!("{base}/#/?prefix=waiter-"))
        .await
        .unwrap();
    until("the list at a phone's width", || async {
        // The three, and the run of one a reset ended.
        Ok(count(&client, "table.workflows tbody tr").await == 4)
    })
    .await;
    screenshot(&client, "workflows-phone").await;

    // Retention from the hosts page: the cancelled ones that finished more than 0 s ago (one),
    // after a confirmation.
    client.set_window_size(1280, 800).await.unwrap();
    client.goto(&format!("{base}/#/hosts")).await.unwrap();
    let older = client
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css("#prune input[name=older]"))
        .await
        .unwrap();
    older.clear().await.unwrap();
    older.send_keys("0s").await.unwrap();
    client
        .find(Locator::Css("#prune select[name=status]"))
        .await
        .unwrap()
        .select_by_value("cancelled")
        .await
        .unwrap();
    client
        .find(Locator::Css("#prune-button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    client.accept_alert().await.unwrap();
    until("the page says what it removed", || async {
        let state = client
            .find(Locator::Css("#prune-state"))
            .await
            .map_err(|e| e.to_string())?;
        Ok(state.attr("data-pruned").await.map_err(|e| e.to_string())? == Some("1".into()))
    })
    .await;
    assert_eq!(
        api.status("waiter-cancel/run-1").unwrap_err().status(),
        Some(404),
        "the cancelled run was removed"
    );
    assert_eq!(
        api.status("waiter-cancel").unwrap().run,
        2,
        "its new run stays"
    );
    assert_eq!(api.status("waiter-api").unwrap().status, "completed");

    // Schedules: created from the page (its module uploaded), paused, run now and deleted.
    client.goto(&format!("{base}/#/schedules")).await.unwrap();
    until("the page says there are none", || async {
        Ok(text_of(&client, "#schedules")
            .await?
            .contains("No schedules yet"))
    })
    .await;
    for (field, value) in [
        ("id", "hourly"),
        ("entry", "echo"),
        ("every", "1h"),
        ("input", "5"),
    ] {
        let input = client
            .find(Locator::Css(&format!("#new-schedule [name={field}]")))
            .await
            .unwrap();
        input.clear().await.unwrap();
        input.send_keys(value).await.unwrap();
    }
    client
        .find(Locator::Css("#new-schedule [name=module]"))
        .await
        .unwrap()
        .send_keys(wfhost_test_programs::PROBE)
        .await
        .unwrap();
    client
        .find(Locator::Css("#create-schedule"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until("the schedule is listed", || async {
        Ok(text_of(&client, "[data-schedule=hourly] [data-state]").await? == "active")
    })
    .await;
    assert_eq!(api.schedule("hourly").unwrap().when, "every 1h");
    for (act, shown) in [("pause", "paused"), ("resume", "active")] {
        client
            .find(Locator::Css(&format!(
                "[data-schedule=hourly] [data-act={act}]"
            )))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        until("the page shows it", || async {
            Ok(text_of(&client, "[data-schedule=hourly] [data-state]").await? == shown)
        })
        .await;
    }
    client
        .find(Locator::Css("[data-schedule=hourly] [data-act=trigger]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    until("the page names the workflow it started", || async {
        Ok(text_of(&client, "#schedule-state")
            .await?
            .starts_with("Started hourly@"))
    })
    .await;
    client
        .find(Locator::Css("[data-schedule=hourly] [data-act=delete]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    client.accept_alert().await.unwrap();
    until("the schedule is gone", || async {
        Ok(text_of(&client, "#schedules")
            .await?
            .contains("No schedules yet"))
    })
    .await;
    assert_eq!(api.schedules().unwrap().schedules.len(), 0);
    client.close().await.unwrap();
}
