"""What a call to a wfhost server can end in, other than its answer.

Every refusal carries the API's `code` (a word programs can match) and `message` (what was wrong
and what to do); the class says the HTTP status, so that `except NotFound:` reads as it means.
"""

from __future__ import annotations

from typing import Any, Optional


class WfhostError(Exception):
    """A call that failed: the server refused it (`status`, `code`, `message`), or no answer
    came (`status` is None; `code` is `refused`, `unreachable` or `timeout`)."""

    def __init__(self, message: str, *, status: Optional[int] = None, code: str = "error"):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status!r}, code={self.code!r}, message={self.message!r})"


class BadRequest(WfhostError):
    """400: the request was wrong (a bad id, input, wait, ...)."""


class Unauthorized(WfhostError):
    """401: the server wants its token (`Client(url, token=...)`)."""


class Forbidden(WfhostError):
    """403: the token does not allow this (a worker's own token, for another function)."""


class NotFound(WfhostError):
    """404: no such workflow, module, schedule or task."""


class Conflict(WfhostError):
    """409: the id exists with another module, entry point or input; a task moved on; or a
    reset found the workflow running, or a module that does not replay its steps."""


class TooLarge(WfhostError):
    """413: the request is past the server's limit."""


class TooManyRequests(WfhostError):
    """429: a mailbox is full, or a payload is past its limit."""


class Unavailable(WfhostError):
    """503: the server could not do it now (starting, stopping, its store away), and asking
    again within the client's `retry_for` did not help."""


class ServerError(WfhostError):
    """Another 5xx: the server failed (a damaged workflow answers 500)."""


class Unreachable(WfhostError):
    """No answer: no server listens there (`code` "refused"), or the connection failed."""


class Timeout(WfhostError):
    """No answer within the client's timeout."""


class WorkflowFailed(WfhostError):
    """The workflow ended in failure: `kind` and `message` are its error's, `workflow` it."""

    def __init__(self, workflow: Any):
        error = workflow.error or {}
        super().__init__(
            f"workflow '{workflow.id}' failed ({error.get('kind', 'failed')}): {error.get('message', '')}",
            code="workflow_failed",
        )
        self.kind = error.get("kind", "failed")
        self.workflow = workflow


class WorkflowCancelled(WfhostError):
    """The workflow was cancelled (and cleaned up, if it does)."""

    def __init__(self, workflow: Any):
        super().__init__(f"workflow '{workflow.id}' was cancelled", code="workflow_cancelled")
        self.workflow = workflow


class WorkflowDamaged(WfhostError):
    """The workflow's journal cannot be read back: it goes no further until the store is
    repaired."""

    def __init__(self, workflow: Any):
        super().__init__(
            f"workflow '{workflow.id}' is damaged: {workflow.damaged or ''}", code="damaged"
        )
        self.workflow = workflow


class StillRunning(WfhostError, TimeoutError):
    """The workflow had not ended when the wait was over; `workflow` is where it stood."""

    def __init__(self, workflow: Any, wait: float):
        super().__init__(
            f"workflow '{workflow.id}' is still {workflow.status} after {wait:g} s: wait longer "
            "(result(id, wait=...)), or watch it with status(id)",
            code="still_running",
        )
        self.workflow = workflow


BY_STATUS = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: TooLarge,
    429: TooManyRequests,
    503: Unavailable,
}


def refusal(status: int, body: bytes) -> WfhostError:
    """The error a refusal carries (`{"error": {"code", "message"}}`), or one made from its
    status when it carries none."""
    import json

    try:
        detail = json.loads(body)["error"]
        code, message = str(detail["code"]), str(detail["message"])
    except (ValueError, KeyError, TypeError):
        code = "http"
        message = f"the server answered {status}: {body[:300].decode('utf-8', 'replace')}"
    kind = BY_STATUS.get(status, ServerError if status >= 500 else WfhostError)
    return kind(message, status=status, code=code)
