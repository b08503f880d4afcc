"""What the server answers, as Python objects. Each keeps the JSON it came from as `raw`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Optional


def _time(ms: Optional[int]) -> Optional[datetime]:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _value(data: dict, key: str) -> Any:
    """A payload: JSON as it is; another encoding (a Rust workflow's postcard) as the API
    shows it, a hex string beside `<key>_encoding`."""
    return data.get(key)


@dataclass
class Workflow:
    """Where a workflow stands."""

    id: str
    status: str
    """`running`, `paused`, `damaged`, `completed`, `failed` or `cancelled`."""
    entry: str
    module: str
    module_name: str
    number: int
    started: datetime
    steps: int
    input: Any = None
    result: Any = None
    """The result, once it completed."""
    error: Optional[dict] = None
    """`{"kind", "message"}` once it failed."""
    finished: Optional[datetime] = None
    parent: Optional[int] = None
    host: Optional[str] = None
    waiting_for_host: bool = False
    damaged: Optional[str] = None
    unread_messages: int = 0
    cancel_asked: bool = False
    paused: bool = False
    run: int = 1
    """Its number among the runs of its id: 1, and one more at each reset."""
    new: Optional[bool] = None
    """For a start: whether this start made it (False: it existed, started the same way)."""
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def finished_ok(self) -> bool:
        return self.status == "completed"

    @property
    def is_finished(self) -> bool:
        return self.status in ("completed", "failed", "cancelled")

    @classmethod
    def of(cls, data: dict, new: Optional[bool] = None) -> "Workflow":
        return cls(
            id=data["id"],
            status=data["status"],
            entry=data["entry"],
            module=data["module"],
            module_name=data.get("module_name", ""),
            number=data["number"],
            started=_time(data["started"]),
            steps=data["steps"],
            input=_value(data, "input"),
            result=_value(data, "result"),
            error=data.get("error"),
            finished=_time(data.get("finished")),
            parent=data.get("parent"),
            host=data.get("host"),
            waiting_for_host=data.get("waiting_for_host", False),
            damaged=data.get("damaged"),
            unread_messages=data.get("unread_messages", 0),
            cancel_asked=data.get("cancel_asked", False),
            paused=data.get("paused", False),
            run=data.get("run", 1),
            new=new,
            raw=data,
        )


@dataclass
class ModuleVersion:
    """A version of a module name: `orders` version 3 is `orders@3` in a start."""

    name: str
    version: int


@dataclass
class Module:
    """A module the store keeps."""

    hash: str
    entry_points: list
    size: int
    names: list = field(default_factory=list)
    """The names it was uploaded under, each with its version (`ModuleVersion`); for an upload
    with a name, the one it was given."""
    new: Optional[bool] = None
    """For an upload: whether the store did not have it."""
    raw: dict = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, data: dict, new: Optional[bool] = None) -> "Module":
        return cls(
            hash=data["hash"],
            entry_points=list(data.get("entry_points", [])),
            size=data.get("size", 0),
            names=[ModuleVersion(n["name"], n["version"]) for n in data.get("names", [])],
            new=new,
            raw=data,
        )


@dataclass
class OutboxMessage:
    """A message a workflow sent the host (`ctx.send(HOST, ...)`)."""

    tag: int
    at: datetime
    data: Any
    raw: dict = field(default_factory=dict, repr=False)


@dataclass
class OutboxPage:
    messages: list
    next: str
    """The cursor after these messages: give it as `after` for the next ones."""
    finished: bool
    """The workflow has ended: no message follows these."""


def dumps(value: Any) -> Any:
    """`value` checked to be JSON (a clear error before anything is sent)."""
    try:
        json.dumps(value)
    except (TypeError, ValueError) as error:
        raise TypeError(f"the input is not JSON: {error}") from None
    return value
