"""The inventory service of the order saga, as an activity worker: `reserve_stock` calls
`inventory.reserve`, and this worker serves it.

    pip install ./guest-sdk/python
    WFHOST_SERVER=http://127.0.0.1:8080 python3 examples/order-py/worker.py

The idempotency key is the same for every delivery of one call (also after the host restarts):
reserve once per key.
"""

import os

from wfhost_client import Rejected, Worker

STOCK = {"kettle": 10, "teapot": 3}
RESERVED = {}  # idempotency key -> reservation

worker = Worker(
    os.environ.get("WFHOST_SERVER", "http://127.0.0.1:8080"),
    token=os.environ.get("WFHOST_TOKEN"),
    concurrency=8,
)


@worker.function("inventory.reserve")
def reserve(request, task):
    if task.idempotency_key in RESERVED:
        return RESERVED[task.idempotency_key]
    sku, quantity = request["sku"], request["quantity"]
    if STOCK.get(sku, 0) < quantity:
        raise Rejected(f"only {STOCK.get(sku, 0)} {sku} left")
    STOCK[sku] -= quantity
    RESERVED[task.idempotency_key] = f"reservation {len(RESERVED) + 1}"
    return RESERVED[task.idempotency_key]


if __name__ == "__main__":
    worker.run()  # until Ctrl-C or SIGTERM: then it finishes what it holds
