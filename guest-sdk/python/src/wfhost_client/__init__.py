"""Start, watch, message and operate wfhost workflows from Python, and serve the functions
they call (activity workers), over a `wfhost serve --http` server.

    from wfhost_client import Client, Worker

    client = Client("http://127.0.0.1:8080", token="s3cret")
    receipt = client.execute(module, "place_order", {"id": 17}, id="order-17", wait=60)
"""

__version__ = "0.1.0"

from .client import Client  # noqa: E402
from .errors import (  # noqa: E402
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    ServerError,
    StillRunning,
    Timeout,
    TooLarge,
    TooManyRequests,
    Unauthorized,
    Unavailable,
    Unreachable,
    WfhostError,
    WorkflowCancelled,
    WorkflowDamaged,
    WorkflowFailed,
)
from .types import Module, ModuleVersion, OutboxMessage, OutboxPage, Workflow  # noqa: E402
from .worker import Rejected, Task, Worker  # noqa: E402

__all__ = [
    "BadRequest",
    "Client",
    "Conflict",
    "Forbidden",
    "Module",
    "ModuleVersion",
    "NotFound",
    "OutboxMessage",
    "OutboxPage",
    "Rejected",
    "ServerError",
    "StillRunning",
    "Task",
    "Timeout",
    "TooLarge",
    "TooManyRequests",
    "Unauthorized",
    "Unavailable",
    "Unreachable",
    "WfhostError",
    "Worker",
    "Workflow",
    "WorkflowCancelled",
    "WorkflowDamaged",
    "WorkflowFailed",
]
