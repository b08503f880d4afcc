"""`Client`: start, watch, message and operate workflows on a `wfhost serve --http` server."""

from __future__ import annotations

import time
import uuid
from typing import Any, Iterator, Optional, Union

from . import __version__
from ._transport import Transport, duration, segment
from .errors import StillRunning, WorkflowCancelled, WorkflowDamaged, WorkflowFailed
from .types import Module, OutboxMessage, OutboxPage, Workflow, _time, dumps

DEFAULT_TIMEOUT = 30.0
"""How long a call may take (its waits excepted), in seconds."""

DEFAULT_RETRY_FOR = 30.0
"""How long a call keeps asking again a server that is starting or restarting, in seconds."""

ASK_AT_MOST = 55.0
"""The longest one request waits: shorter than what proxies tend to allow an answer to take.
A longer wait asks again until it is over."""

Wait = Union[float, int, str]


class Client:
    """A client of one `wfhost serve --http` server: one method per operation of its API,
    blocking, connections kept alive. Safe to share between threads.

    >>> client = Client("http://127.0.0.1:8080", token="s3cret")
    >>> order = client.execute(module, "place_order", {"id": 17}, id="order-17")

    `token`: the server's token (`--token-file`), sent with every call. `timeout`: how long a
    call may take, its waits excepted. `retry_for`: how long a call keeps asking again a server
    that is starting or restarting (0: never). `verify`: TLS verification (`False`, or the
    path of a CA bundle for a server's own certificate). `traceparent`: a W3C trace context
    (`00-<trace id>-<span id>-<flags>`) sent as the `traceparent` header with every call, so
    that a traced server (`wfhost serve --otlp-endpoint`) makes its spans, and the workflows
    started, children of the caller's span; `start(..., traceparent=...)` gives one call its
    own. A server ignores one it cannot read.
    """

    def __init__(
        self,
        url: str,
        *,
        token: Optional[str] = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry_for: float = DEFAULT_RETRY_FOR,
        verify: Any = True,
        traceparent: Optional[str] = None,
    ):
        self._api = Transport(
            url,
            token=token,
            timeout=timeout,
            retry_for=retry_for,
            verify=verify,
            user_agent=f"wfhost-client-python/{__version__}",
            traceparent=traceparent,
        )

    @property
    def url(self) -> str:
        return self._api.base

    def close(self) -> None:
        """Closes the connections."""
        self._api.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    # Modules

    def put_module(self, wasm: Union[bytes, str], name: Optional[str] = None) -> Module:
        """Stores a module (its `.wasm` bytes, or the path of its file): what the server knows
        of it (`hash`, `entry_points`), and whether it was new. With `name` (1 to 100 ASCII
        letters, digits, `-`, `_` or `.`, a letter first), under that name too: it takes the
        name's next version unless it is the name's latest already, and `names` holds the
        version it has (`BadRequest` for a name that is not one). A start may then name it by
        the name (its latest version) or `name@version`."""
        if isinstance(wasm, str):
            with open(wasm, "rb") as file:
                wasm = file.read()
        params = None if name is None else {"name": name}
        # Safe to send again: the same bytes under the same name store nothing new.
        answer = self._api.call(
            "POST", "/v1/modules", raw=wasm, content_type="application/wasm", params=params
        )
        return Module.of(answer.json(), new=answer.status_code == 201)

    def modules(self) -> list:
        """The modules the store keeps, each with the names (and versions) it was stored
        under."""
        return [Module.of(m) for m in self._api.call("GET", "/v1/modules").json()["modules"]]

    # Workflows

    def start(
        self,
        module: str,
        entry: str,
        input: Any = None,
        *,
        id: Optional[str] = None,
        wait: Optional[Wait] = None,
        traceparent: Optional[str] = None,
    ) -> Workflow:
        """Starts entry point `entry` of `module` (its hash, a name it was stored under: the
        name's latest version, or `name@version`; `NotFound` for an unknown one) with `input`
        (JSON); started by a name, the workflow's `module_name` is the name. With an id a
        start is idempotent: one that existed started the same way is not started again
        (`new` is False), one started otherwise is refused (`Conflict`). With `wait` (seconds,
        or `"30s"`; at most 55 s, one request's), also waits that long for it to end, in the
        same request: the workflow then holds its `result` (or `error`) when it ended in time.
        A start that waits without an id gets one made here (`wf-` and a UUID), so that it is
        safe to ask again. `traceparent` (in place of the client's): the W3C trace context the
        workflow joins, as a child of the caller's span, on a traced server."""
        params = None
        waited = 0.0
        if wait is not None:
            params = {"wait": duration(min(_seconds(wait), ASK_AT_MOST))}
            waited = min(_seconds(wait), ASK_AT_MOST)
            # A start that waits gets an id here when it has none: a wait a restart cut short
            # is then safe to ask again, and the caller always has the workflow's id.
            if id is None:
                id = f"wf-{uuid.uuid4()}"
        body = {"module": module, "entry": entry, "input": dumps(input)}
        if id is not None:
            body["id"] = id
        answer = self._api.call(
            "POST",
            "/v1/workflows",
            body=body,
            params=params,
            wait=waited,
            safe=id is not None,
            traceparent=traceparent,
        ).json()
        return Workflow.of(answer["workflow"], new=answer["new"])

    def execute(
        self,
        module: str,
        entry: str,
        input: Any = None,
        *,
        id: Optional[str] = None,
        wait: Wait = 60.0,
        traceparent: Optional[str] = None,
    ) -> Any:
        """Starts a workflow (as `start`, `traceparent` too) and waits for its result: the
        value it returned. Raises `WorkflowFailed` or `WorkflowCancelled` as it ended,
        `StillRunning` when it had not ended within `wait`."""
        total = _seconds(wait)
        deadline = time.monotonic() + total
        workflow = self.start(module, entry, input, id=id, wait=total, traceparent=traceparent)
        left = deadline - time.monotonic()
        if not workflow.is_finished and workflow.status != "damaged" and left > 0:
            workflow = self.wait(workflow.id, wait=left)
        return _outcome(workflow, total)

    def status(self, id: str) -> Workflow:
        """Where workflow `id` stands."""
        return Workflow.of(self._api.call("GET", f"/v1/workflows/{segment(id)}").json())

    def wait(self, id: str, wait: Wait = 30.0) -> Workflow:
        """Where workflow `id` stands once it ends, waiting up to `wait` for that; still
        running at the deadline, where it stands then."""
        deadline = time.monotonic() + _seconds(wait)
        while True:
            # The server caps each wait (`--max-wait`): asked again until the wait is spent.
            asked = min(max(0.0, deadline - time.monotonic()), ASK_AT_MOST)
            data = self._api.call(
                "GET",
                f"/v1/workflows/{segment(id)}/result",
                params={"wait": duration(asked)},
                wait=asked,
            ).json()
            workflow = Workflow.of(data)
            if workflow.is_finished or workflow.status == "damaged":
                return workflow
            if time.monotonic() >= deadline:
                return workflow

    def result(self, id: str, wait: Wait = 30.0) -> Any:
        """The result of workflow `id`, waiting up to `wait` for it to end. Raises
        `WorkflowFailed`, `WorkflowCancelled` or `WorkflowDamaged` as it ended, `StillRunning`
        when it had not ended within the wait."""
        return _outcome(self.wait(id, wait), _seconds(wait))

    def send(self, id: str, message: Any) -> int:
        """Sends workflow `id` the message (JSON): its number. Not sent again after an answer
        that may have been lost (a message may not be wanted twice)."""
        answer = self._api.call(
            "POST", f"/v1/workflows/{segment(id)}/messages", body=dumps(message), safe=False
        )
        return answer.json()["message"]

    def cancel(self, id: str) -> str:
        """Asks workflow `id` to cancel: `asked`, `asked_before`, or `ended` (it had ended)."""
        return self._api.call("POST", f"/v1/workflows/{segment(id)}/cancel").json()["cancel"]

    def pause(self, id: str) -> bool:
        """Pauses workflow `id`: it takes no step until unpaused (across restarts too). Whether
        this paused it (False: it was paused, or it had ended)."""
        return self._api.call("POST", f"/v1/workflows/{segment(id)}/pause").json()["pause"] == "done"

    def unpause(self, id: str) -> bool:
        """Unpauses workflow `id`: it goes on where it was. Whether this unpaused it (False: it
        was not paused, or it had ended)."""
        answer = self._api.call("POST", f"/v1/workflows/{segment(id)}/unpause").json()
        return answer["pause"] == "done"

    def upgrade(self, id: str, module: str) -> dict:
        """Gives running workflow `id` the module `module` (a hash the store keeps, a name or
        `name@version`) if its journal replays the same with it; `Conflict` names the step
        that differs otherwise."""
        return self._api.call(
            "POST", f"/v1/workflows/{segment(id)}/upgrade", body={"module": module}
        ).json()

    def reset(
        self, id: str, to_step: Optional[int] = None, module: Union[str, bytes, None] = None
    ) -> dict:
        """Resets finished workflow `id`: a new run keeps its journal up to step `to_step` (by
        default the step before the one that ended it), replays it and goes on under the same
        id, with `module` (a hash the store keeps, a name or `name@version`, or `.wasm` bytes,
        stored first) in place of its own if given. What the reset did: `{"id", "run",
        "previous", "steps", "module", "messages"}`; the run before is kept as `previous`
        (`<id>/run-1`, ...). `Conflict` when it has not finished, or the module does not replay
        the steps kept. Not sent again after an answer that may have been lost (it would find
        the new run running: `Conflict`)."""
        body: dict = {}
        if to_step is not None:
            body["to_step"] = to_step
        if isinstance(module, (bytes, bytearray, memoryview)):
            module = self.put_module(bytes(module)).hash
        if module is not None:
            body["module"] = module
        return self._api.call(
            "POST", f"/v1/workflows/{segment(id)}/reset", body=body, safe=False
        ).json()

    def runs(self, id: str) -> list:
        """The runs of workflow `id`, first to last: those resets ended (`<id>/run-1`, ...),
        then the one `id` names now."""
        answer = self._api.call("GET", f"/v1/workflows/{segment(id)}/runs").json()
        return [Workflow.of(data) for data in answer["runs"]]

    def list(
        self,
        *,
        status: Optional[str] = None,
        entry: Optional[str] = None,
        prefix: Optional[str] = None,
        top_level: Optional[bool] = None,
        parent: Optional[int] = None,
        page_size: int = 100,
    ) -> Iterator[Workflow]:
        """The store's workflows, oldest first, page by page as the iterator goes."""
        after = None
        while True:
            params = {
                "status": status,
                "entry": entry,
                "prefix": prefix,
                "top_level": top_level,
                "parent": parent,
                "limit": page_size,
                "after": after,
            }
            page = self._api.call("GET", "/v1/workflows", params=params).json()
            for data in page["workflows"]:
                yield Workflow.of(data)
            after = page.get("next")
            if not after:
                return

    def counts(self, *, entry: Optional[str] = None, prefix: Optional[str] = None) -> dict:
        """How many workflows stand each way: `{"running": n, "completed": n, ...}`."""
        params = {"entry": entry, "prefix": prefix}
        return self._api.call("GET", "/v1/workflow-counts", params=params).json()

    def history(self, id: str, *, page_size: int = 100) -> Iterator[dict]:
        """Workflow `id`'s journal, step by step, each in words (as `wfhost history`)."""
        after = None
        while True:
            params = {"after": after, "limit": page_size}
            page = self._api.call("GET", f"/v1/workflows/{segment(id)}/history", params=params)
            page = page.json()
            yield from page["steps"]
            after = page.get("next")
            if not after:
                return

    def waits(self, id: str) -> dict:
        """What workflow `id` waits for now: its open commands, and whether a message."""
        return self._api.call("GET", f"/v1/workflows/{segment(id)}/waits").json()

    def outbox(self, id: str, *, after: Optional[str] = None, wait: Optional[Wait] = None) -> OutboxPage:
        """The messages workflow `id` sent the host after the cursor `after`; with `wait`,
        waits up to that long for one when none is there yet."""
        params = {"after": after, "wait": None if wait is None else duration(wait)}
        waited = 0.0 if wait is None else _seconds(wait)
        page = self._api.call(
            "GET", f"/v1/workflows/{segment(id)}/outbox", params=params, wait=waited
        ).json()
        messages = [
            OutboxMessage(tag=m["tag"], at=_time(m["at"]), data=m.get("data"), raw=m)
            for m in page["messages"]
        ]
        return OutboxPage(messages=messages, next=page["next"], finished=page["finished"])

    # Schedules

    def create_schedule(
        self,
        id: str,
        module: str,
        entry: str,
        input: Any = None,
        *,
        cron: Optional[str] = None,
        every: Optional[Wait] = None,
        time_zone: Optional[str] = None,
        overlap: Optional[str] = None,
        catch_up: Optional[str] = None,
        jitter: Optional[Wait] = None,
    ) -> dict:
        """Creates schedule `id`: `entry` of `module` started on `cron` (six fields, seconds
        first, in `time_zone`) or `every` (seconds, or `"1h"`)."""
        body = {"id": id, "module": module, "entry": entry, "input": dumps(input)}
        for key, value in (("cron", cron), ("time_zone", time_zone), ("overlap", overlap), ("catch_up", catch_up)):
            if value is not None:
                body[key] = value
        if every is not None:
            body["every"] = duration(every)
        if jitter is not None:
            body["jitter"] = duration(jitter)
        # Not sent again after a lost answer: it would find its own schedule (`Conflict`).
        return self._api.call("POST", "/v1/schedules", body=body, safe=False).json()

    def schedules(self) -> list:
        """Every schedule."""
        return self._api.call("GET", "/v1/schedules").json()["schedules"]

    def schedule(self, id: str) -> dict:
        """Schedule `id`."""
        return self._api.call("GET", f"/v1/schedules/{segment(id)}").json()

    def pause_schedule(self, id: str) -> bool:
        """Pauses schedule `id`: whether this changed it."""
        return self._api.call("POST", f"/v1/schedules/{segment(id)}/pause").json()["changed"]

    def resume_schedule(self, id: str) -> bool:
        """Resumes schedule `id`: whether this changed it."""
        return self._api.call("POST", f"/v1/schedules/{segment(id)}/resume").json()["changed"]

    def trigger_schedule(self, id: str) -> Workflow:
        """Fires schedule `id` now: the workflow it started."""
        answer = self._api.call("POST", f"/v1/schedules/{segment(id)}/trigger", safe=False).json()
        return Workflow.of(answer["workflow"], new=answer["new"])

    def delete_schedule(self, id: str) -> bool:
        """Deletes schedule `id` (the workflows it started stay): whether it was there."""
        return self._api.call("DELETE", f"/v1/schedules/{segment(id)}").json()["changed"]

    # The server

    def workers(self) -> list:
        """For each worker function: the workers polling for it (`name`, `host`,
        `last_poll_ms`, `polling`), the tasks waiting (`waiting`, `oldest_waiting_ms`), in
        flight, completed and failed (`GET /v1/workers`)."""
        return self._api.call("GET", "/v1/workers").json()["functions"]

    def ready(self) -> bool:
        """Whether the server is ready: its store reachable, its lease held (asked again
        while it is starting, within `retry_for`)."""
        return self._api.call("GET", "/readyz").json().get("status") == "ok"


def _seconds(wait: Wait) -> float:
    if isinstance(wait, str):
        from ._duration import parse

        return parse(wait)
    if wait < 0:
        raise ValueError(f"a wait is not negative: {wait}")
    return float(wait)


def _outcome(workflow: Workflow, wait: float) -> Any:
    if workflow.status == "completed":
        return workflow.result
    if workflow.status == "failed":
        raise WorkflowFailed(workflow)
    if workflow.status == "cancelled":
        raise WorkflowCancelled(workflow)
    if workflow.status == "damaged":
        raise WorkflowDamaged(workflow)
    raise StillRunning(workflow, wait)
