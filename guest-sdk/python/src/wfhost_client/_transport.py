"""One call to the server, asked again while the server is starting or restarting.

Asked again, within the client's `retry_for`: a `503` whose code says the server did nothing
(it had no host yet, or held as many requests or connections as it takes), for any call; any `503` for a call safe to repeat; a refused connection (nothing was sent), for any
call; a dropped connection, for a call safe to repeat. The pause is the `503`'s `Retry-After`
(between 0.1 s and 2 s), else 0.1 s doubling to 2 s. A call that may have been done (a start
without an id, a message) is never sent twice.
"""

from __future__ import annotations

import json
import time
from typing import Any, Optional
from urllib.parse import quote

import httpx

from .errors import Timeout, Unreachable, WfhostError, refusal

# The 503 codes of a server that refused before doing anything: it has no host yet, or holds as
# many requests or connections as it takes. Others (`unavailable`, `shutting_down`, `store`) may
# come after a write.
NOTHING_DONE = frozenset(
    {"not_ready", "too_many_waiting", "too_many_connections", "too_many_requests"}
)
FIRST_PAUSE = 0.1
NOTHING = object()
"""No body (a message may be `None`: JSON's null)."""
LONGEST_PAUSE = 2.0


def segment(text: str) -> str:
    """`text` as one path segment: `/` (children's ids hold it) and `.` (so that no id reads
    as `..`) percent-encoded too."""
    return quote(text, safe="-_~").replace(".", "%2E")


def duration(seconds: Any) -> str:
    """A wait as the API writes it: `1500ms` for 1.5 (seconds); a string passes as it is."""
    if isinstance(seconds, str):
        return seconds
    if seconds < 0:
        raise ValueError(f"a wait is not negative: {seconds}")
    return f"{max(0, round(seconds * 1000))}ms"


class Transport:
    """The connections to one server (kept alive), its token, its timeouts."""

    def __init__(
        self,
        url: str,
        *,
        token: Optional[str],
        timeout: float,
        retry_for: float,
        verify: Any = True,
        user_agent: str,
        traceparent: Optional[str] = None,
    ):
        base = url.rstrip("/")
        if not (base.startswith("http://") or base.startswith("https://")):
            raise WfhostError(
                f"'{url}' is not a server's address: give http://HOST:PORT or https://HOST:PORT",
                code="bad_request",
            )
        headers = {"user-agent": user_agent}
        if token:
            headers["authorization"] = f"Bearer {token}"
        if traceparent is not None:
            headers["traceparent"] = check_traceparent(traceparent)
        self.base = base
        self.timeout = timeout
        self.retry_for = retry_for
        self.http = httpx.Client(
            headers=headers, verify=verify, follow_redirects=False, timeout=timeout
        )

    def close(self) -> None:
        self.http.close()

    def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = NOTHING,
        raw: Optional[bytes] = None,
        content_type: str = "application/json",
        params: Optional[dict] = None,
        wait: float = 0.0,
        safe: bool = True,
        retry_for: Optional[float] = None,
        traceparent: Optional[str] = None,
    ) -> httpx.Response:
        """The answer to one call that is not a refusal; raises the refusal's error otherwise.
        `safe`: doing it twice is doing it once (a read, a start with an id, a cancel).
        `retry_for`: this call's own time to ask again (the client's by default).
        `traceparent`: this call's W3C trace context, in place of the client's."""
        content = raw
        headers = {}
        if traceparent is not None:
            headers["traceparent"] = check_traceparent(traceparent)
        if body is not NOTHING:
            content = json.dumps(body).encode()
        if content is not None:
            headers["content-type"] = content_type
        if params:
            params = {k: _param(v) for k, v in params.items() if v is not None}
        # Counted from the first failure: a long wait that a restart cut short is asked again.
        deadline = None
        pause = FIRST_PAUSE
        while True:
            try:
                response = self.http.request(
                    method,
                    self.base + path,
                    content=content,
                    headers=headers,
                    params=params,
                    timeout=self.timeout + wait,
                )
            except httpx.ConnectError as error:
                failure: WfhostError = Unreachable(
                    f"cannot reach the server at {self.base} (is it running?): {error}",
                    code="refused",
                )
                again: Optional[float] = pause
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as error:
                failure = Unreachable(f"the server dropped the connection: {error}", code="unreachable")
                again = pause if safe else None
            except httpx.TimeoutException:
                raise Timeout(
                    f"the server did not answer within {self.timeout + wait:g} s", code="timeout"
                ) from None
            except httpx.HTTPError as error:
                raise Unreachable(f"cannot reach the server: {error}", code="unreachable") from None
            else:
                if response.status_code < 400:
                    return response
                failure = refusal(response.status_code, response.content)
                again = None
                if response.status_code == 503 and (safe or failure.code in NOTHING_DONE):
                    again = _retry_after(response) or pause
            if deadline is None:
                deadline = time.monotonic() + (self.retry_for if retry_for is None else retry_for)
            if again is None or time.monotonic() + again > deadline:
                raise failure
            time.sleep(again)
            pause = min(pause * 2, LONGEST_PAUSE)


def check_traceparent(traceparent: Any) -> str:
    """`traceparent` if it is a string (sent as the `traceparent` header; the server reads it
    as W3C Trace Context says, and ignores one it cannot read)."""
    if not isinstance(traceparent, str):
        raise TypeError(f"a traceparent is a string, not {type(traceparent).__name__}")
    return traceparent


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _retry_after(response: httpx.Response) -> Optional[float]:
    try:
        seconds = float(response.headers.get("retry-after", ""))
    except ValueError:
        return None
    return min(max(seconds, FIRST_PAUSE), LONGEST_PAUSE)
