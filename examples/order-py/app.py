"""The shop's application: stores the workflow module, places an order and prints how it ended.

    WFHOST_SERVER=http://127.0.0.1:8080 python3 examples/order-py/app.py o-1 kettle 2
"""

import os
import sys

from wfhost_client import Client, WorkflowFailed

# Built with `wfhost build examples/order-py/shop.py` (or given as SHOP_MODULE).
MODULE = os.environ.get(
    "SHOP_MODULE", os.path.join(os.path.dirname(os.path.abspath(__file__)), "shop.wasm")
)


def main(order_id, sku, quantity):
    with Client(os.environ.get("WFHOST_SERVER", "http://127.0.0.1:8080"),
                token=os.environ.get("WFHOST_TOKEN")) as client:
        module = client.put_module(MODULE).hash
        order = {"id": order_id, "sku": sku, "quantity": quantity, "amount_cents": 4999}
        # The order's id is the workflow's: placing it twice places it once.
        try:
            outcome = client.execute(module, "place_order", order, id=f"order-{order_id}", wait=60)
        except WorkflowFailed as failure:
            print(f"order {order_id} failed: {failure.workflow.error['message']}")
            return 1
        print(f"order {order_id}: {outcome['status']}")
        for line in outcome["log"]:
            print(f"  {line}")
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
