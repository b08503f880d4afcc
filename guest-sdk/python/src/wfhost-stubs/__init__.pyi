"""Types of the `wfhost` module that Python workflows import (it exists only inside the
workflow runtime that `wfhost build shop.py` packs; these stubs let an editor and a type
checker know it). A test checks them against the runtime's module."""

from datetime import datetime
from typing import Any, Awaitable, Callable, Coroutine, Generator, Mapping, Optional, Sequence, Tuple, TypeVar, Union, overload

_T = TypeVar("_T")
_Entry = TypeVar("_Entry", bound=Callable[..., Coroutine[Any, Any, Any]])

JSON = Any
"""A JSON value: None, bool, int, float, str, a list or a dict of them."""

HOST: int
"""The pid of the host: `await ctx.send(wfhost.HOST, value)` reaches the application."""

class Cancelled(BaseException):
    """Raised at the await in progress when the workflow is cancelled."""

class CommandError(Exception):
    """A command the host could not carry out: `kind` names why (`child-failed`, `timeout`,
    `rejected`, `failed`, ...), `message` says what."""

    kind: str
    message: str
    def __init__(self, kind: str, message: str) -> None: ...

class _Pending(Awaitable[_T]):
    """A command in flight: awaiting it gives its result; one never awaited is abandoned."""

    def __await__(self) -> Generator[Any, Any, _T]: ...

@overload
def entry(name_or_function: _Entry) -> _Entry: ...
@overload
def entry(name_or_function: Optional[str] = None) -> Callable[[_Entry], _Entry]: ...
def gather(*awaitables: Awaitable[Any]) -> _Pending[list]:
    """Awaits every command and coroutine given, at once: their results, in order."""

def select(*awaitables: Awaitable[Any]) -> _Pending[Tuple[int, Any]]:
    """Awaits the first to finish: `(index, result)`; the others are abandoned."""

class HttpResponse(dict):
    """`{"status": int, "headers": [(name, value), ...], "body": bytes}`."""

class Context:
    """A workflow's handle on its host."""

    pid: int
    parent: Optional[int]
    entry: str
    def __init__(self, pid: int, parent: Optional[int], entry_name: str) -> None: ...
    def sleep(self, seconds: float) -> _Pending[None]: ...
    def now(self) -> datetime: ...
    def random(self) -> float: ...
    def info(self, text: object) -> None: ...
    def warn(self, text: object) -> None: ...
    def send(self, pid: int, value: JSON) -> _Pending[None]: ...
    def recv(self, timeout: Optional[float] = None) -> _Pending[JSON]: ...
    def spawn(self, entry_name: str, input: JSON = None) -> _Pending[int]: ...
    def join(self, child: int) -> _Pending[JSON]: ...
    def cancel(self, child: int) -> _Pending[None]: ...
    def call(self, name: str, input: JSON = None) -> _Pending[JSON]: ...
    def http(
        self,
        method: str,
        url: str,
        headers: Union[None, Mapping[str, str], Sequence[Tuple[str, str]]] = None,
        body: Union[bytes, str] = b"",
        timeout: Optional[float] = None,
    ) -> _Pending[HttpResponse]: ...
    def patched(self, change_id: str) -> bool: ...
