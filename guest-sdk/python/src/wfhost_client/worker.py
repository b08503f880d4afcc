"""`Worker`: serves functions that workflows call (`ctx.call("payments.charge", order)`) from
a program of your own, over a `wfhost serve --http` server's task routes.

A worker long-polls the server for tasks of the functions registered with it, runs each in a
thread of its own (at most `concurrency` at once), heartbeats each while it runs so that it
keeps it, and answers with the function's result or error. The call's idempotency key and the
task's attempt come with the task: the key is the same for every delivery of one call, also
after the host restarts, so do the effect once per key. A traced server
(`wfhost serve --otlp-endpoint`) gives the call's trace context too (`task.traceparent`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Optional

from . import __version__
from ._transport import Transport, duration, segment
from .errors import Conflict, NotFound, WfhostError

log = logging.getLogger("wfhost_client.worker")

LONGEST_PAUSE = 2.0

LONGEST_BEAT = 20.0
"""The longest time between two heartbeats of one task."""


def _beat_in(lease: float) -> float:
    """How long after a delivery or heartbeat that gave the task `lease` seconds to heartbeat
    again: a third of it, between 1 s and [`LONGEST_BEAT`]."""
    return min(max(lease / 3, 1.0), LONGEST_BEAT)


class Rejected(Exception):
    """An error a retry will not mend (a card declined, an address that does not exist): the
    workflow's call fails at once, whatever its retry policy. Any other exception is an error
    worth retrying."""


@dataclass
class Task:
    """One delivery of a call to a function."""

    id: str
    """The delivery's name, as the server gave it."""
    function: str
    idempotency_key: Optional[str]
    """The same for every delivery of one call: do the effect once per key."""
    attempt: int
    """This delivery's number, from 1: above 1, an earlier one was not completed in time."""
    deadline: datetime
    """When the task goes to another worker unless heartbeaten (the worker does that)."""
    lease: float = 60.0
    """How long the delivery (or the last heartbeat) gave the task, as the server said."""
    next_beat: float = 0.0
    """When to heartbeat next, by this process's monotonic clock (never by comparing its
    wall clock with the server's: the two may differ)."""
    moved_on: threading.Event = field(default_factory=threading.Event, repr=False)
    """Set when the task moved on (its deadline passed and another worker has it) or the
    worker stops without waiting for it: a long function may look, and stop early."""
    traceparent: Optional[str] = None
    """The W3C trace context of the call (`00-<trace id>-<span id>-<flags>`), the span of the
    workflow's call, when the server is traced (`wfhost serve --otlp-endpoint`); None otherwise.
    Continue the trace: make your spans children of it, e.g. with OpenTelemetry's
    TraceContext propagator (`TraceContextTextMapPropagator().extract({"traceparent":
    task.traceparent})`)."""


class Worker:
    """Serves functions to workflows through the server at `url`.

    >>> worker = Worker("http://127.0.0.1:8080", token="s3cret", concurrency=8)
    >>> @worker.function("payments.charge")
    ... def charge(order, task):
    ...     return payments.charge(order["amount"], key=task.idempotency_key)
    >>> worker.run()   # until Ctrl-C or SIGTERM, then a graceful stop

    `name` is how the server shows this worker among a function's pollers (`GET /v1/workers`;
    default `HOST:PID`). A function takes the call's input (JSON), and the `Task` when it has a
    second parameter; it
    may be `async`. Its return value (JSON) is the call's result; `Rejected` fails the call for
    good; any other exception fails it as worth retrying (the workflow's policy decides).
    """

    def __init__(
        self,
        url: str,
        *,
        token: Optional[str] = None,
        concurrency: int = 8,
        poll_wait: float = 10.0,
        timeout: float = 30.0,
        retry_for: float = 30.0,
        verify: Any = True,
        name: Optional[str] = None,
    ):
        if concurrency < 1:
            raise ValueError("a worker runs at least one task at once: concurrency >= 1")
        self._api = Transport(
            url,
            token=token,
            timeout=timeout,
            retry_for=retry_for,
            verify=verify,
            user_agent=f"wfhost-worker-python/{__version__}",
        )
        self.machine = socket.gethostname()
        self.name = name or f"{self.machine}:{os.getpid()}"
        """This worker's name, as `GET /v1/workers` shows it."""
        self._functions: Dict[str, Callable] = {}
        self._with_task: Dict[str, bool] = {}
        self._concurrency = concurrency
        self._poll_wait = poll_wait
        self._slots = threading.Semaphore(concurrency)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._running: Dict[str, Task] = {}
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        self._grace = 30.0
        self._stop_at = 0.0
        self.completed = 0
        """Tasks completed (with a result or an error) since the worker started."""

    def function(self, name: str) -> Callable[[Callable], Callable]:
        """Registers the decorated function as `name` (a function the server serves:
        `--worker-function NAME`)."""

        def register(function: Callable) -> Callable:
            self.register(name, function)
            return function

        return register

    def register(self, name: str, function: Callable) -> None:
        """Registers `function` as `name`."""
        if not name or len(name) > 256:
            raise ValueError(f"a function's name has 1 to 256 bytes: {name!r}")
        parameters = [
            p
            for p in inspect.signature(function).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        self._functions[name] = function
        self._with_task[name] = len(parameters) >= 2

    def run(self, *, stop_on_signals: bool = True) -> None:
        """Serves tasks until `stop()` (from another thread, or SIGINT/SIGTERM when
        `stop_on_signals` and this is the main thread). A server that restarts or cannot be
        reached is asked again, without end: the worker outlives it."""
        if not self._functions:
            raise ValueError("no functions: register one with @worker.function(NAME) first")
        self._stopping.clear()
        self._stopped.clear()
        restore = self._trap_signals() if stop_on_signals else {}
        beats = threading.Thread(target=self._heartbeat, name="wfhost-heartbeat", daemon=True)
        beats.start()
        try:
            self._poll()
        finally:
            if not self._stopping.is_set():
                # Ended by an error (a refused poll): the running tasks still get their grace.
                self.stop(self._grace)
            self._finish()
            for signum, handler in restore.items():
                signal.signal(signum, handler)
            self._stopped.set()

    def stop(self, grace: float = 30.0, *, wait: bool = False) -> None:
        """Stops taking tasks; the running ones have `grace` seconds to finish, and those that
        do not are given back (another worker takes them at once, with the same key). With
        `wait`, returns once the worker has stopped."""
        self._grace = grace
        self._stop_at = time.monotonic()
        self._stopping.set()
        if wait:
            self._stopped.wait()

    def close(self) -> None:
        self._api.close()

    # The loop

    def _poll(self) -> None:
        functions = sorted(self._functions)
        pause = 0.1
        while not self._stopping.is_set():
            # A slot first: a task is taken only when it can run.
            if not self._slots.acquire(timeout=0.5):
                continue
            try:
                answer = self._api.call(
                    "POST",
                    "/v1/tasks/poll",
                    body={
                        "functions": functions,
                        "wait": duration(self._poll_wait),
                        "worker": self.name,
                        "host": self.machine,
                    },
                    wait=self._poll_wait,
                    safe=False,
                    # Asked again here, where a stop is seen, not inside the transport.
                    retry_for=0.0,
                )
            except WfhostError as error:
                self._slots.release()
                if error.status in (400, 401, 403, 404):
                    # Nothing a retry mends: the server has no such functions, or this
                    # worker's token is wrong.
                    raise
                log.warning("cannot take a task (asking again in %.1f s): %s", pause, error)
                self._stopping.wait(pause)
                pause = min(pause * 2, LONGEST_PAUSE)
                continue
            pause = 0.1
            if answer.status_code == 204:
                self._slots.release()
                continue
            data = answer.json()
            task = Task(
                id=data["task"],
                function=data["function"],
                idempotency_key=data.get("idempotency_key"),
                attempt=data.get("attempt", 1),
                deadline=datetime.fromtimestamp(data["deadline_ms"] / 1000, tz=timezone.utc),
                traceparent=data.get("traceparent"),
            )
            self._leased(task, data)
            if self._stopping.is_set():
                # Taken as the worker stops: the next worker gets it now.
                self._release(task)
                self._slots.release()
                return
            with self._lock:
                self._running[task.id] = task
            # A thread each, a daemon: a function that never returns does not keep the process
            # alive once the worker has stopped and given its task back.
            threading.Thread(
                target=self._serve,
                args=(task, data.get("input")),
                name=f"wfhost-task-{task.function}",
                daemon=True,
            ).start()

    @staticmethod
    def _leased(task: Task, answer: dict) -> None:
        """Notes what a delivery or heartbeat gave `task`: its deadline, and when to heartbeat
        next, timed by the lease the server measured (`lease_ms`, by its own clock: this
        machine's may differ) and this process's monotonic clock."""
        task.deadline = datetime.fromtimestamp(answer["deadline_ms"] / 1000, tz=timezone.utc)
        if "lease_ms" in answer:
            task.lease = answer["lease_ms"] / 1000
        else:
            # An older server: the deadline against this clock, which the bounds of `_beat_in`
            # keep from going far wrong.
            task.lease = (task.deadline - datetime.now(timezone.utc)).total_seconds()
        task.next_beat = time.monotonic() + _beat_in(task.lease)

    def _serve(self, task: Task, input: Any) -> None:
        try:
            answer = self._answer(task, input)
            if task.moved_on.is_set():
                return
            try:
                self._api.call(
                    "POST", f"/v1/tasks/{segment(task.id)}/complete", body=answer, safe=False
                )
                with self._lock:
                    self.completed += 1
            except (Conflict, NotFound) as error:
                log.info("task %s (%s) moved on: %s", task.id, task.function, error)
            except WfhostError as error:
                # Unanswered: the task goes to a worker again at its deadline, with its key.
                log.warning("task %s (%s) not completed: %s", task.id, task.function, error)
        finally:
            with self._lock:
                self._running.pop(task.id, None)
                self._idle.notify_all()
            self._slots.release()

    def _answer(self, task: Task, input: Any) -> dict:
        function = self._functions[task.function]
        arguments = (input, task) if self._with_task[task.function] else (input,)
        try:
            result = function(*arguments)
            if inspect.isawaitable(result):
                result = asyncio.run(_awaited(result))
            return {"result": result}
        except Rejected as error:
            return {"error": {"message": str(error) or "rejected", "retryable": False}}
        except Exception as error:  # any other error may pass: the workflow's policy retries
            log.info("task %s (%s) failed: %r", task.id, task.function, error)
            return {"error": {"message": f"{type(error).__name__}: {error}", "retryable": True}}

    def _heartbeat(self) -> None:
        """Moves each running task's deadline on, a third of its lease after the last time
        (between 1 s and 20 s, by this process's monotonic clock)."""
        while not self._stopped.is_set():
            now = time.monotonic()
            with self._lock:
                running = list(self._running.values())
            for task in running:
                if task.moved_on.is_set() or now < task.next_beat:
                    continue
                try:
                    beat = self._api.call(
                        "POST", f"/v1/tasks/{segment(task.id)}/heartbeat", retry_for=1.0
                    )
                    self._leased(task, beat.json())
                except (Conflict, NotFound):
                    log.warning("task %s (%s) moved on: stop working on it", task.id, task.function)
                    task.moved_on.set()
                except WfhostError as error:
                    log.warning("task %s: heartbeat failed: %s", task.id, error)
            if self._stopping.wait(0.5) and not running:
                return

    def _finish(self) -> None:
        """Waits up to the grace for the running tasks, gives back the rest."""
        left = self._stop_at + self._grace - time.monotonic()
        with self._idle:
            self._idle.wait_for(lambda: not self._running, timeout=max(0.0, left))
            unfinished = list(self._running.values())
        for task in unfinished:
            task.moved_on.set()
            self._release(task)

    def _release(self, task: Task) -> None:
        try:
            self._api.call("POST", f"/v1/tasks/{segment(task.id)}/release", retry_for=2.0)
            log.info("task %s (%s) given back", task.id, task.function)
        except WfhostError as error:
            log.warning("task %s not given back (it goes at its deadline): %s", task.id, error)

    def _trap_signals(self) -> dict:
        if threading.current_thread() is not threading.main_thread():
            return {}
        restore = {}
        for signum in (signal.SIGINT, signal.SIGTERM):
            restore[signum] = signal.signal(signum, lambda *_: self.stop(self._grace))
        return restore


async def _awaited(awaitable: Any) -> Any:
    return await awaitable
