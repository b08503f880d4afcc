#!/usr/bin/env python3
"""An activity worker for wfhost in Python, standard library only.

It long-polls a `wfhost serve --http` server for tasks of the functions it serves, runs each,
and answers with the result (or an error, saying whether a retry may help). Run it as

    WFHOST_SERVER=http://127.0.0.1:8080 WFHOST_TOKEN=... python3 worker.py

The functions below are an inventory and a shipping service for the order saga; replace them
with your own. Each gets the call's input (JSON) and its idempotency key: the key is the same for
every delivery of one call, also after the host restarts, so do the effect once per key.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request

SERVER = os.environ.get("WFHOST_SERVER", "http://127.0.0.1:8080").rstrip("/")
TOKEN = os.environ.get("WFHOST_TOKEN")
# Stop after this many tasks (0: never); the tests use it.
MAX_TASKS = int(os.environ.get("WORKER_MAX_TASKS", "0"))


class Rejected(Exception):
    """An error that a retry will not mend."""


def reserve(order, key):
    return {"reserved": order["sku"], "key": key}


def release(reservation, key):
    return {"released": reservation["reserved"]}


def ship(order, key):
    if order.get("address") is None:
        raise Rejected("the order has no address")
    return {"shipped_to": order["address"]}


FUNCTIONS = {
    "inventory.reserve": reserve,
    "inventory.release": release,
    "shipping.ship": ship,
}


def call(method, path, body=None, timeout=60):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(SERVER + path, data=data, method=method)
    request.add_header("content-type", "application/json")
    if TOKEN:
        request.add_header("authorization", "Bearer " + TOKEN)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        text = response.read()
        return response.status, (json.loads(text) if text else None)


def main():
    done = 0
    while MAX_TASKS == 0 or done < MAX_TASKS:
        try:
            status, task = call("POST", "/v1/tasks/poll",
                                {"functions": list(FUNCTIONS), "wait": "20s"}, timeout=80)
        except (urllib.error.URLError, OSError) as error:
            # The server restarting, or not up yet: ask again in a moment.
            print("cannot take a task: %s" % error, file=sys.stderr)
            time.sleep(1)
            continue
        if status == 204:
            continue
        function = FUNCTIONS[task["function"]]
        try:
            answer = {"result": function(task["input"], task.get("idempotency_key"))}
        except Rejected as error:
            answer = {"error": {"message": str(error), "retryable": False}}
        except Exception as error:  # anything else may pass: let the workflow's policy retry
            answer = {"error": {"message": repr(error), "retryable": True}}
        try:
            call("POST", "/v1/tasks/%s/complete" % task["task"], answer)
        except urllib.error.HTTPError as error:
            # 409: the task moved on (its deadline passed and another worker has it).
            print("task %s: %s" % (task["task"], error.read().decode()), file=sys.stderr)
        except (urllib.error.URLError, OSError) as error:
            # Unanswered: the task goes to a worker again after its deadline, with the same key.
            print("task %s not completed: %s" % (task["task"], error), file=sys.stderr)
        done += 1


if __name__ == "__main__":
    main()
