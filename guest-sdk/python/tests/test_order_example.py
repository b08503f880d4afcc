"""The README's order example, as a user runs it: the shop (examples/order-py/shop.py) on a
server, its inventory worker (worker.py) and its application (app.py), all in Python."""

import importlib.util
import os
import subprocess
import sys
import threading

from conftest import ROOT, Server, wfhost_bin

EXAMPLE = ROOT / "examples" / "order-py"


def test_the_order_example_in_python(tmp_path, monkeypatch):
    shop = tmp_path / "shop.wasm"
    subprocess.run(
        [wfhost_bin(), "build", str(EXAMPLE / "shop.py"), "-o", str(shop)],
        check=True,
        capture_output=True,
    )
    server = Server(tmp_path, ["--worker-function", "inventory.reserve"]).start()
    monkeypatch.setenv("WFHOST_SERVER", server.url)
    spec = importlib.util.spec_from_file_location("order_worker", EXAMPLE / "worker.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.worker._poll_wait = 1.0
    thread = threading.Thread(target=example.worker.run, kwargs={"stop_on_signals": False})
    thread.start()
    env = {**os.environ, "WFHOST_SERVER": server.url, "SHOP_MODULE": str(shop)}

    def app(*args):
        return subprocess.run(
            [sys.executable, str(EXAMPLE / "app.py"), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    try:
        placed = app("o-1", "kettle", "2")
        assert placed.returncode == 0, placed.stderr
        assert placed.stdout.splitlines() == [
            "order o-1: completed",
            "  reserve_stock: reserved 2 (reservation 1)",
            "  charge_payment: charged 4999 cents",
            "  ship_order: shipped o-1",
        ]
        # Placed again: the same order, not a second reservation.
        again = app("o-1", "kettle", "2")
        assert again.stdout == placed.stdout
        assert example.STOCK["kettle"] == 8
        # More than the stock: the worker rejects it, and the saga compensates.
        short = app("o-2", "teapot", "5")
        assert short.returncode == 0, short.stderr
        assert short.stdout.splitlines() == ["order o-2: compensated", "  reserve_stock: failed"]
        assert example.STOCK["teapot"] == 3
    finally:
        example.worker.stop(grace=5)
        thread.join(timeout=60)
        server.kill()
