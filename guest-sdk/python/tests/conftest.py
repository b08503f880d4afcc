"""A real `wfhost serve --http` for the tests, and the workflow module they start.

The `wfhost` binary is `$WFHOST_BIN`, else the workspace's debug build (`$CARGO_TARGET_DIR`
or `target/`, as the README's test command builds it).
"""

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from wfhost_client import Client

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent


def wfhost_bin() -> str:
    given = os.environ.get("WFHOST_BIN")
    if given:
        return given
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    if not target.is_absolute():
        target = ROOT / target
    binary = target / "debug" / "wfhost"
    if not binary.exists():
        pytest.exit(f"no wfhost binary at {binary}: run `cargo build -p wfhost-cli`, or set WFHOST_BIN")
    return str(binary)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `wfhost serve --http` on a port of its own; `restart()` keeps its port and store."""

    def __init__(self, directory: Path, args=()):
        self.directory = directory
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = list(args)
        self.process = None
        self.starts = 0

    def start(self, ready=True):
        self.starts += 1
        log = open(self.directory / f"serve-{self.starts}.log", "wb")
        self.process = subprocess.Popen(
            [
                wfhost_bin(), "serve",
                "--store", str(self.directory / "wf.db"),
                "--http", f"127.0.0.1:{self.port}",
                "--workers", "2", "--grace", "1s", "--poll", "50ms",
                *self.args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            # Neither a token nor a collector (OTEL_EXPORTER_OTLP_ENDPOINT) from the caller's
            # environment: a test that traces says so in its arguments.
            env={
                k: v
                for k, v in os.environ.items()
                if k != "WFHOST_TOKEN" and not k.startswith("OTEL_")
            },
        )
        if ready:
            self.wait_ready()
        return self

    def wait_ready(self):
        token = None
        if "--token-file" in self.args:
            token = Path(self.args[self.args.index("--token-file") + 1]).read_text().strip()
        with Client(self.url, token=token, retry_for=60) as client:
            assert client.ready()

    def kill(self):
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self):
        self.kill()
        return self.start()

    def log(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.directory.glob("serve-*.log")))


@pytest.fixture(scope="session")
def shop(tmp_path_factory) -> bytes:
    """The tests' workflow module (tests/workflows/shop.py), built once."""
    out = tmp_path_factory.mktemp("shop") / "shop.wasm"
    subprocess.run(
        [wfhost_bin(), "build", str(HERE / "workflows" / "shop.py"), "-o", str(out)],
        check=True,
        capture_output=True,
    )
    return out.read_bytes()


@pytest.fixture
def server(tmp_path):
    server = Server(tmp_path, ["--worker-function", "payments.charge"]).start()
    yield server
    server.kill()


@pytest.fixture
def client(server):
    with Client(server.url) as client:
        yield client


@pytest.fixture
def module(client, shop) -> str:
    return client.put_module(shop).hash


def wait_for(what, predicate, timeout=60.0):
    """Asks `predicate` until it holds (for what only polling can see, as a task's arrival)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
