"""The worker against a real server: results, errors, concurrency, heartbeats, a graceful
stop that gives back what it holds, and a server that restarts under it."""

import threading

import pytest

from conftest import Server
from wfhost_client import Client, Rejected, Worker, WorkflowFailed


class Running:
    """A worker run on a thread of its own, stopped (and waited for) at the end."""

    def __init__(self, url, **options):
        options.setdefault("poll_wait", 1.0)
        self.worker = Worker(url, **options)
        self.thread = None

    def start(self):
        self.thread = threading.Thread(target=self.worker.run, kwargs={"stop_on_signals": False})
        self.thread.start()
        return self

    def stop(self, grace=30.0):
        self.worker.stop(grace)
        self.thread.join(timeout=120)
        assert not self.thread.is_alive(), "the worker did not stop"
        self.worker.close()


@pytest.fixture
def running(server):
    started = []

    def run(**options):
        worker = Running(server.url, **options)
        started.append(worker)
        return worker

    yield run
    for worker in started:
        if worker.thread and worker.thread.is_alive():
            worker.stop(grace=0)


def test_a_call_is_served_with_its_key_and_attempt(client, module, running):
    seen = []
    worker = running()

    @worker.worker.function("payments.charge")
    def charge(order, task):
        seen.append((task.function, task.attempt, task.idempotency_key))
        return {"charged": order["amount"]}

    worker.start()
    assert client.execute(module, "charge", {"amount": 42}, id="c-1") == {"charged": 42}
    worker.stop()
    assert len(seen) == 1
    function, attempt, key = seen[0]
    assert (function, attempt) == ("payments.charge", 1)
    assert key and key.startswith("c-1")
    assert worker.worker.completed == 1
    # The server saw the worker by its name, and took its completion.
    (charge,) = [f for f in client.workers() if f["function"] == "payments.charge"]
    assert [p["name"] for p in charge["pollers"]] == [worker.worker.name]
    assert charge["pollers"][0]["host"] == worker.worker.machine
    assert (charge["completed"], charge["failed"], charge["waiting"]) == (1, 0, 0)


def test_errors_say_whether_a_retry_may_help(client, module, running):
    worker = running()

    @worker.worker.function("payments.charge")
    def charge(order):
        if order["card"] == "stolen":
            raise Rejected("the card is reported stolen")
        raise ConnectionError("the payment service did not answer")

    worker.start()
    rejected = client.execute(module, "charge_or_say", {"card": "stolen"}, id="r-1")
    assert rejected == {"error": "rejected", "message": "rejected: the card is reported stolen"}
    failed = client.execute(module, "charge_or_say", {"card": "ok"}, id="r-2")
    assert failed["error"] == "failed"
    assert "ConnectionError: the payment service did not answer" in failed["message"]
    # Without a try, the failed call fails the workflow.
    with pytest.raises(WorkflowFailed) as failure:
        client.execute(module, "charge", {"card": "stolen"}, id="r-3")
    assert "the card is reported stolen" in failure.value.workflow.error["message"]
    worker.stop()


def test_async_functions_and_as_many_tasks_at_once_as_allowed(client, module, running):
    worker = running(concurrency=2)
    together = threading.Barrier(2, timeout=60)
    lock = threading.Lock()
    now = {"running": 0, "most": 0}

    @worker.worker.function("payments.charge")
    async def charge(order):
        with lock:
            now["running"] += 1
            now["most"] = max(now["most"], now["running"])
        # Two at once, or this never returns.
        together.wait()
        with lock:
            now["running"] -= 1
        return order["n"]

    worker.start()
    for n in range(4):
        client.start(module, "charge", {"n": n}, id=f"many-{n}")
    assert [client.result(f"many-{n}", wait=60) for n in range(4)] == [0, 1, 2, 3]
    worker.stop()
    assert now["most"] == 2


def test_heartbeats_keep_a_long_task(tmp_path, shop):
    server = Server(tmp_path, ["--worker-function", "payments.charge", "--task-timeout", "2s"]).start()
    try:
        client = Client(server.url)
        module = client.put_module(shop).hash
        worker = Running(server.url)
        attempts = []

        @worker.worker.function("payments.charge")
        def charge(order, task):
            attempts.append(task.attempt)
            # Twice the task's timeout: only heartbeats keep it.
            task.moved_on.wait(4.0)
            return {"moved_on": task.moved_on.is_set()}

        worker.start()
        assert client.execute(module, "charge", {}, id="long-1") == {"moved_on": False}
        worker.stop()
        assert attempts == [1]
    finally:
        server.kill()


def test_a_stop_gives_back_what_it_holds(client, module, running):
    first = running()
    taken = threading.Event()
    release = threading.Event()

    @first.worker.function("payments.charge")
    def stuck(order, task):
        taken.set()
        release.wait(120)
        return "from the first worker"

    first.start()
    client.start(module, "charge", {}, id="given-back")
    assert taken.wait(60)
    # No grace: the task goes back at once (not at its deadline, a minute away).
    first.stop(grace=0)
    second = running()
    attempts = []

    @second.worker.function("payments.charge")
    def charge(order, task):
        attempts.append(task.attempt)
        return "from the second worker"

    second.start()
    assert client.result("given-back", wait=30) == "from the second worker"
    assert attempts == [2]
    second.stop()
    release.set()


def test_a_worker_outlives_a_server_restart(server, client, module, running):
    worker = running()

    @worker.worker.function("payments.charge")
    def charge(order):
        return order["n"] * 2

    worker.start()
    assert client.execute(module, "charge", {"n": 1}, id="before") == 2
    server.restart()
    assert client.execute(module, "charge", {"n": 2}, id="after") == 4
    worker.stop()
    assert worker.worker.completed == 2
