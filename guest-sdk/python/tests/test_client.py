"""The client against a real server: every operation, with exact answers."""

import pytest

from conftest import Server
from wfhost_client import (
    BadRequest,
    Client,
    Conflict,
    ModuleVersion,
    NotFound,
    StillRunning,
    Unauthorized,
    Unreachable,
    WorkflowCancelled,
    WorkflowFailed,
)


def test_a_module_is_stored_once_and_a_start_is_idempotent(client, shop):
    first = client.put_module(shop)
    again = client.put_module(shop)
    assert (first.new, again.new, again.hash) == (True, False, first.hash)
    assert {"echo", "fail", "wait_message", "charge"} <= set(first.entry_points)
    assert [m.hash for m in client.modules()] == [first.hash]

    started = client.start(first.hash, "echo", {"n": 1}, id="e-1")
    assert (started.id, started.new) == ("e-1", True)
    assert client.result("e-1", wait=60) == {"n": 1}
    same = client.start(first.hash, "echo", {"n": 1}, id="e-1")
    assert (same.new, same.status, same.result) == (False, "completed", {"n": 1})
    with pytest.raises(Conflict) as refused:
        client.start(first.hash, "echo", {"n": 2}, id="e-1")
    assert refused.value.status == 409 and refused.value.code == "conflict"
    assert "another input" in refused.value.message
    anonymous = client.start(first.hash, "echo", None)
    assert anonymous.id.startswith("wf-") and anonymous.new


def another_module(wasm: bytes) -> bytes:
    """`wasm` with a custom section more: the same code, other bytes (another hash)."""
    name = b"wfhost-client-test"
    content = bytes([len(name)]) + name + b"2"
    return wasm + bytes([0, len(content)]) + content


def test_a_module_is_named_and_started_by_its_name(client, shop):
    first = client.put_module(shop, name="shop")
    assert (first.new, first.names) == (True, [ModuleVersion("shop", 1)])
    # Sent again, the same bytes under the same name: nothing new, still version 1.
    again = client.put_module(shop, name="shop")
    assert (again.new, again.hash, again.names) == (False, first.hash, [ModuleVersion("shop", 1)])
    assert [(m.hash, m.names) for m in client.modules()] == [
        (first.hash, [ModuleVersion("shop", 1)])
    ]

    started = client.start("shop", "echo", "by name", id="named-1", wait=60)
    assert (started.module, started.module_name, started.result) == (
        first.hash,
        "shop",
        "by name",
    )
    assert client.status("named-1").module_name == "shop"

    # Other bytes under the name: its next version, which the name alone now starts.
    second = client.put_module(another_module(shop), name="shop")
    assert (second.new, second.names) == (True, [ModuleVersion("shop", 2)])
    assert second.hash != first.hash
    latest = client.start("shop", "echo", 2, id="named-2", wait=60)
    assert (latest.module, latest.module_name, latest.result) == (second.hash, "shop", 2)
    pinned = client.start("shop@1", "echo", 1, id="named-3", wait=60)
    assert (pinned.module, pinned.module_name, pinned.result) == (first.hash, "shop", 1)
    listed = {m.hash: m.names for m in client.modules()}
    assert listed == {
        first.hash: [ModuleVersion("shop", 1)],
        second.hash: [ModuleVersion("shop", 2)],
    }

    with pytest.raises(BadRequest) as bad:
        client.put_module(shop, name="1-shop")
    assert (bad.value.status, bad.value.code) == (400, "bad_request")
    with pytest.raises(NotFound) as unknown:
        client.start("nope", "echo", 1)
    assert (unknown.value.status, unknown.value.code) == (404, "unknown_module")
    with pytest.raises(NotFound) as unknown:
        client.start("shop@3", "echo", 1)
    assert (unknown.value.status, unknown.value.code) == (404, "unknown_module")


def test_start_and_wait_in_one_request(client, module):
    done = client.start(module, "echo", [1, 2], id="sw-1", wait=60)
    assert (done.new, done.status, done.result) == (True, "completed", [1, 2])
    assert client.execute(module, "echo", "x", id="sw-2") == "x"
    # Sent again: the same result, nothing started.
    assert client.execute(module, "echo", "x", id="sw-2") == "x"
    with pytest.raises(WorkflowFailed) as failed:
        client.execute(module, "fail", "card declined", id="sw-3")
    assert failed.value.kind == "failed"
    assert "card declined" in failed.value.workflow.error["message"]
    # Not ended within the wait: where it stands.
    waiting = client.start(module, "wait_message", 600, id="sw-4", wait=0.05)
    assert (waiting.status, waiting.new) == ("running", True)
    with pytest.raises(StillRunning) as running:
        client.result("sw-4", wait=0.05)
    assert running.value.workflow.status == "running"
    assert client.send("sw-4", {"go": True}) == 1
    assert client.result("sw-4", wait="60s") == {"go": True}


def test_operations_on_a_workflow(client, module):
    client.start(module, "wait_message", 600, id="op-1")
    assert client.pause("op-1") is True
    assert client.pause("op-1") is False
    assert client.status("op-1").paused is True
    client.send("op-1", "while paused")
    assert client.unpause("op-1") is True
    assert client.result("op-1", wait=60) == "while paused"
    history = list(client.history("op-1", page_size=1))
    assert len(history) == client.status("op-1").steps
    assert [s["step"] for s in history] == list(range(1, len(history) + 1))

    client.start(module, "wait_message", 600, id="op-2")
    assert client.cancel("op-2") == "asked"
    with pytest.raises(WorkflowCancelled):
        client.result("op-2", wait=60)
    assert client.cancel("op-2") == "ended"
    with pytest.raises(NotFound) as unknown:
        client.status("nobody")
    assert unknown.value.code == "unknown_workflow"
    with pytest.raises(BadRequest):
        client.start("not a hash", "echo", 1)
    with pytest.raises(TypeError):
        client.start(module, "echo", {1, 2})


def test_a_listing_follows_its_pages(client, module):
    ids = [f"page-{n}" for n in range(5)]
    for id in ids:
        client.start(module, "echo", id, id=id, wait=60)
    listed = [w.id for w in client.list(prefix="page-", page_size=2)]
    assert listed == ids
    assert [w.id for w in client.list(prefix="page-", status="running")] == []
    counts = client.counts(prefix="page-")
    assert (counts["completed"], counts["running"]) == (5, 0)


def test_schedules(client, module):
    created = client.create_schedule("nightly", module, "echo", "tick", cron="0 0 2 * * *", time_zone="UTC")
    assert created["id"] == "nightly"
    assert [s["id"] for s in client.schedules()] == ["nightly"]
    assert client.pause_schedule("nightly") is True
    assert client.schedule("nightly")["paused"] is True
    assert client.resume_schedule("nightly") is True
    fired = client.trigger_schedule("nightly")
    assert client.result(fired.id, wait=60) == "tick"
    assert client.delete_schedule("nightly") is True
    with pytest.raises(NotFound):
        client.schedule("nightly")


def test_a_token_is_required_and_sent(tmp_path, shop):
    token = tmp_path / "token"
    token.write_text("s3cret-token-for-tests\n")
    server = Server(tmp_path, ["--token-file", str(token)]).start()
    try:
        with Client(server.url) as anonymous:
            with pytest.raises(Unauthorized) as refused:
                anonymous.modules()
            assert refused.value.status == 401
        with Client(server.url, token="s3cret-token-for-tests") as client:
            module = client.put_module(shop).hash
            assert client.execute(module, "echo", 5) == 5
    finally:
        server.kill()


def test_a_restarting_server_is_ridden_out(tmp_path, shop):
    server = Server(tmp_path, []).start()
    try:
        client = Client(server.url, retry_for=120)
        module = client.put_module(shop).hash
        client.start(module, "wait_message", 600, id="durable-1")
        server.kill()
        # Nothing listens: without time to ask again, said as it is.
        with Client(server.url, retry_for=0) as impatient:
            with pytest.raises(Unreachable) as down:
                impatient.status("durable-1")
            assert down.value.code == "refused"
        # Started again (not waited for): the client asks until it answers, and the
        # workflow is there, still waiting for its message.
        server.start(ready=False)
        assert client.status("durable-1").status == "running"
        client.send("durable-1", "after the restart")
        assert client.result("durable-1", wait=60) == "after the restart"
        client.close()
    finally:
        server.kill()


def test_bad_addresses_are_refused_before_anything_is_sent():
    with pytest.raises(Exception) as refused:
        Client("wf.db")
    assert "http://HOST:PORT" in str(refused.value)



def test_a_finished_workflow_is_reset_and_its_runs_listed(client, module, shop):
    with pytest.raises(WorkflowFailed):
        client.execute(module, "fail", "card declined", id="rs-1")
    assert client.status("rs-1").run == 1
    assert [(w.id, w.run) for w in client.runs("rs-1")] == [("rs-1", 1)]

    # By default from the step before the one that failed it: its first, so none is kept.
    reset = client.reset("rs-1")
    assert reset == {
        "id": "rs-1",
        "run": 2,
        "previous": "rs-1/run-1",
        "steps": 0,
        "module": module,
        "messages": 0,
    }
    with pytest.raises(WorkflowFailed) as failed:
        client.result("rs-1", wait=60)
    assert failed.value.workflow.run == 2
    runs = client.runs("rs-1")
    assert [(w.id, w.run, w.status) for w in runs] == [
        ("rs-1/run-1", 1, "failed"),
        ("rs-1", 2, "failed"),
    ]
    assert runs[0].error["message"] == runs[1].error["message"]

    # A module given as its bytes is stored first, then named by its hash.
    again = client.reset("rs-1", to_step=0, module=shop)
    assert (again["run"], again["previous"], again["steps"], again["module"]) == (
        3,
        "rs-1/run-2",
        0,
        module,
    )
    with pytest.raises(WorkflowFailed):
        client.result("rs-1", wait=60)
    assert [(w.id, w.run) for w in client.runs("rs-1")] == [
        ("rs-1/run-1", 1),
        ("rs-1/run-2", 2),
        ("rs-1", 3),
    ]

    # Refused: a step past the last that may be kept, a workflow still running, an unknown id
    # or module.
    with pytest.raises(BadRequest) as past:
        client.reset("rs-1", to_step=5)
    assert (past.value.status, past.value.code) == (400, "invalid_input")
    client.start(module, "wait_message", 600, id="rs-2")
    with pytest.raises(Conflict) as running:
        client.reset("rs-2")
    assert (running.value.status, running.value.code) == (409, "conflict")
    assert [(w.id, w.run, w.status) for w in client.runs("rs-2")] == [("rs-2", 1, "running")]
    with pytest.raises(NotFound) as unknown:
        client.reset("nobody")
    assert unknown.value.code == "unknown_workflow"
    with pytest.raises(NotFound) as unknown:
        client.runs("nobody")
    assert unknown.value.code == "unknown_workflow"
    with pytest.raises(NotFound):
        client.reset("rs-1", module="0" * 64)
