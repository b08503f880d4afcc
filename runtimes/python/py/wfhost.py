"""Workflows in Python for wfhost.

An entry point is an ``async def`` decorated with ``@wfhost.entry`` (or
``@wfhost.entry("another-name")``); it takes the workflow's context and its input
(a JSON value) and returns a JSON value. Every method of the context is a command
the host carries out and journals, so a workflow that is stopped and started again
replays to where it was::

    import wfhost

    @wfhost.entry
    async def greet(ctx, name):
        await ctx.sleep(1.5)
        ctx.info(f"greeting {name}")
        return {"hello": name}

A command starts when its method is called and completes when awaited, so several
run at once: ``await wfhost.gather(ctx.call("a", 1), ctx.call("b", 2))``.
"""

import sys as _sys

import _wfhost

__all__ = [
    "HOST",
    "Cancelled",
    "CommandError",
    "Context",
    "entry",
    "gather",
    "select",
]

#: The pid of the host: ``await ctx.send(wfhost.HOST, value)`` reaches the application that
#: started the workflow.
HOST = 0

_entries = {}


class Cancelled(BaseException):
    """Raised at the await in progress when the workflow is cancelled. A workflow may catch it
    to clean up (its commands still run); one that lets it out ends as cancelled. Like asyncio's
    ``CancelledError``, it is not an ``Exception``: ``except Exception`` does not swallow it."""


class CommandError(Exception):
    """A command the host could not carry out: ``kind`` names why (``child-failed``,
    ``timeout``, ``no-such-process``, ``function-failed``, ...), ``message`` says what."""

    def __init__(self, kind, message):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


class _Pending:
    """A command in flight: awaiting it gives its result."""

    __slots__ = ("_id",)

    def __init__(self, handle):
        self._id = handle

    def __await__(self):
        return (yield self)

    def __del__(self):
        # Never awaited: the command is abandoned (a timer is dropped at the host).
        _wfhost.forget(self._id)


def entry(name_or_function=None):
    """Registers an ``async def`` as an entry point: ``@wfhost.entry`` names it after the
    function, ``@wfhost.entry("send-reminder")`` gives it another name."""

    def register(function, name):
        if not callable(function) or not (function.__code__.co_flags & 0x80):
            raise TypeError(
                f"@wfhost.entry takes an 'async def' function, not {function!r}"
            )
        if name in _entries and _entries[name] is not function:
            raise ValueError(f"two entry points are named '{name}'")
        _wfhost.check_entry_name(name)
        _entries[name] = function
        return function

    if callable(name_or_function):
        return register(name_or_function, name_or_function.__name__)
    if name_or_function is None or isinstance(name_or_function, str):
        given = name_or_function

        def decorate(function):
            return register(function, given if given is not None else function.__name__)

        return decorate
    raise TypeError("@wfhost.entry takes a name (a string) or nothing")


def gather(*awaitables):
    """Awaits every command and coroutine given, at once: their results, in order. The first
    failure is raised."""
    return _Pending(_wfhost.gather(list(awaitables)))


def select(*awaitables):
    """Awaits the first of the commands and coroutines given to finish: ``(index, result)``.
    The others are abandoned (a join abandoned keeps its child's result for a later join)."""
    return _Pending(_wfhost.select(list(awaitables)))


class Context:
    """A workflow's handle on its host."""

    __slots__ = ("pid", "parent", "entry")

    def __init__(self, pid, parent, entry_name):
        #: This workflow's pid.
        self.pid = pid
        #: The pid of the workflow that spawned it, or None.
        self.parent = parent
        #: The entry point it runs.
        self.entry = entry_name

    def sleep(self, seconds):
        """Completes after ``seconds`` (a float) of the host's time."""
        return _Pending(_wfhost.sleep(float(seconds)))

    def now(self):
        """The host's time: a timezone-aware ``datetime`` in UTC, journaled."""
        import datetime

        nanos = _wfhost.now_nanos()
        return datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(
            microseconds=nanos // 1000
        )

    def random(self):
        """A float in [0, 1), journaled."""
        return _wfhost.random()

    def info(self, text):
        """Logs ``text`` at the host."""
        _wfhost.log("info", str(text))

    def warn(self, text):
        """Logs ``text`` as a warning at the host."""
        _wfhost.log("warn", str(text))

    def send(self, pid, value):
        """Sends ``value`` (JSON) to workflow ``pid`` (``wfhost.HOST``: the host)."""
        return _Pending(_wfhost.send(int(pid), value))

    def recv(self, timeout=None):
        """The next message; with ``timeout`` (seconds), None if none comes in time."""
        return _Pending(_wfhost.recv(None if timeout is None else float(timeout)))

    def spawn(self, entry_name, input=None):
        """Starts entry point ``entry_name`` of this module as a child: its pid."""
        return _Pending(_wfhost.spawn(str(entry_name), input))

    def join(self, child):
        """The result of child ``child`` once it ends; a child that failed or was cancelled
        raises ``CommandError`` (``child-failed``, ``child-cancelled``)."""
        return _Pending(_wfhost.join(int(child)))

    def cancel(self, child):
        """Asks child ``child`` to stop."""
        return _Pending(_wfhost.cancel(int(child)))

    def call(self, name, input=None):
        """Calls host or worker function ``name`` with ``input`` (JSON): its answer."""
        return _Pending(_wfhost.call(str(name), input))

    def http(self, method, url, headers=None, body=b"", timeout=None):
        """An outbound HTTP request (the host allows only what its allowlist says): a dict with
        ``status``, ``headers`` (a list of ``(name, value)``) and ``body`` (bytes). ``headers``
        is a dict or a list of pairs (for a name given twice); ``body`` bytes or a str (sent as
        UTF-8)."""
        if isinstance(body, str):
            body = body.encode()
        if headers is None:
            headers = []
        elif isinstance(headers, dict):
            headers = headers.items()
        pairs = [(str(name), str(value)) for name, value in headers]
        head = {
            "method": str(method),
            "url": str(url),
            "headers": pairs,
            "timeout": None if timeout is None else float(timeout),
        }
        return _Pending(_wfhost.http(head, bytes(body)))

    def patched(self, change_id):
        """Whether the code after patch ``change_id`` runs (see ``wfhost upgrade``)."""
        return _wfhost.patched(str(change_id))

    def __repr__(self):
        return f"<wfhost.Context pid={self.pid} entry={self.entry!r}>"


class _Sources:
    """Imports the workflow's own modules from the sources ``wfhost build`` packed."""

    def __init__(self, files, spec, linecache):
        self.files = files
        self.spec = spec
        self.linecache = linecache

    def find_spec(self, fullname, path=None, target=None):
        base = fullname.replace(".", "/")
        for candidate, package in ((base + "/__init__.py", True), (base + ".py", False)):
            if candidate in self.files:
                spec = self.spec(fullname, self, origin=candidate, is_package=package)
                if package:
                    spec.submodule_search_locations = [base]
                return spec
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        origin = module.__spec__.origin
        source = self.files[origin]
        self.linecache.cache[origin] = (len(source), None, source.splitlines(True), origin)
        module.__file__ = origin
        exec(compile(source, origin, "exec"), module.__dict__)


class _Absent:
    """Refuses, with the reason, the modules a workflow cannot have."""

    SOCKETS = (
        "a workflow opens no sockets: the host makes its HTTP requests (ctx.http, to the URLs "
        "it allows) and its worker functions reach everything else (ctx.call)"
    )
    REFUSED = {"socket": SOCKETS, "_socket": SOCKETS, "ssl": SOCKETS}

    def find_spec(self, fullname, path=None, target=None):
        reason = self.REFUSED.get(fullname)
        if reason is not None:
            raise ImportError(f"module '{fullname}' is not available: {reason}", name=fullname)
        return None


def _no_sleep(*args, **kwargs):
    raise RuntimeError("a workflow waits with 'await ctx.sleep(seconds)', not time.sleep")


def _no_threads(*args, **kwargs):
    raise RuntimeError(
        "a workflow runs no threads: start several commands and await them together with "
        "wfhost.gather or wfhost.select"
    )


def _load(files, main):
    """Imports module ``main`` from ``files`` (path -> source): the entry points it
    registered, by name."""
    # What the finder uses, imported before it is in place (it would be asked for them).
    import importlib
    import linecache
    from importlib.machinery import ModuleSpec

    import _thread
    import threading
    import time

    _thread.start_new_thread = _no_threads
    _thread.start_joinable_thread = _no_threads
    threading.Thread.start = _no_threads
    time.sleep = _no_sleep
    _sys.meta_path.insert(0, _Absent())
    # After the interpreter's own finders: the standard library cannot be shadowed by a file
    # of the same name, as CPython's built-in and frozen modules cannot.
    _sys.meta_path.append(_Sources(files, ModuleSpec, linecache))
    importlib.import_module(main)
    # What loading made is there for good: kept out of the cycle collector's generations, so
    # that no workflow's collection walks (and so writes to) the whole snapshot's heap.
    import gc

    gc.collect()
    gc.freeze()
    if not _entries:
        raise ValueError(
            f"module '{main}' registers no entry point: decorate an 'async def' with @wfhost.entry"
        )
    return sorted(_entries)


def _start(name, pid, parent, value):
    """The coroutine of entry point ``name`` for a new workflow. Its random module, if imported,
    is seeded from the host's journaled entropy, so each workflow draws its own numbers and a
    replay draws the same ones. The entropy is read whether or not ``random`` is imported, so
    that adding or removing an import does not change what a replay reads."""
    seed = _wfhost.entropy()
    module = _sys.modules.get("random")
    if module is not None:
        module.seed(seed)
    return _entries[name](Context(pid, parent, name), value)
