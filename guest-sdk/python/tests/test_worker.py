"""The worker against a real server: results, errors, concurrency, heartbeats, a graceful
stop that gives back what it holds, a server that restarts under it, and the trace context a
traced server gives each task."""

import re
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


TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$")
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
CALLER = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
OTHER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_traced_server_gives_each_task_its_calls_trace_context(tmp_path, shop):
    # A collector that cannot be reached: exports fail (and are only logged), tasks still carry
    # the trace context.
    server = Server(
        tmp_path,
        ["--worker-function", "payments.charge", "--otlp-endpoint", "http://127.0.0.1:9"],
    ).start()
    try:
        client = Client(server.url)
        module = client.put_module(shop).hash
        worker = Running(server.url)
        seen = {}

        @worker.worker.function("payments.charge")
        def charge(order, task):
            seen[order["n"]] = task.traceparent
            return order["n"]

        worker.start()
        # No trace of the caller's: the server's own.
        assert client.execute(module, "charge", {"n": 1}, id="trace-1") == 1
        # The start's traceparent: the workflow, and so its call, joins the caller's trace.
        assert client.execute(module, "charge", {"n": 2}, id="trace-2", traceparent=CALLER) == 2
        client.start(module, "charge", {"n": 3}, id="trace-3", traceparent=CALLER)
        assert client.result("trace-3", wait=60) == 3
        # The client's traceparent, with every call; a start's own wins over it.
        with Client(server.url, traceparent=CALLER) as traced:
            assert traced.execute(module, "charge", {"n": 4}, id="trace-4") == 4
        with Client(server.url, traceparent=OTHER) as other:
            assert other.execute(module, "charge", {"n": 5}, id="trace-5", traceparent=CALLER) == 5
        worker.stop()
        client.close()
    finally:
        server.kill()
    assert sorted(seen) == [1, 2, 3, 4, 5]
    for n, traceparent in seen.items():
        assert traceparent is not None and TRACEPARENT.match(traceparent), (n, traceparent)
    trace_ids = {n: traceparent.split("-")[1] for n, traceparent in seen.items()}
    span_ids = {n: traceparent.split("-")[2] for n, traceparent in seen.items()}
    assert trace_ids[1] != CALLER_TRACE
    assert [trace_ids[n] for n in (2, 3, 4, 5)] == [CALLER_TRACE] * 4
    # The task's span is the workflow's call, a descendant of the caller's span, not it.
    assert CALLER_SPAN not in span_ids.values()
    assert len(set(span_ids.values())) == 5


def test_an_untraced_server_gives_no_trace_context(client, module, running):
    seen = []
    worker = running()

    @worker.worker.function("payments.charge")
    def charge(order, task):
        seen.append(task.traceparent)
        return order["n"]

    worker.start()
    # A traceparent sent to a server that does not trace: nothing comes of it.
    assert client.execute(module, "charge", {"n": 1}, id="untraced", traceparent=CALLER) == 1
    worker.stop()
    assert seen == [None]


def test_a_traceparent_is_a_string():
    with pytest.raises(TypeError):
        Client("http://127.0.0.1:9", traceparent=b"00-...")
    with Client("http://127.0.0.1:9") as client:
        with pytest.raises(TypeError):
            client.start("m", "e", traceparent=17)
