"""The server's guards against hostile clients, in front of the routes.

HTTP level (``RequestGuard``, an ASGI middleware installed by create_app):

- Host: on a loopback bind, a request whose Host header is not a loopback
  name (or one given with ``--host-allow``) is refused with 403. A web page
  the user visits can send requests to 127.0.0.1 (and, with DNS rebinding,
  read the answers under its own name); only the Host header tells them apart.
- Content-Type: a POST whose body is not declared JSON is refused with 415,
  so a page cannot drive the server with a "simple" text/plain request.
- Body size: a body over ``max_body_bytes`` is refused with 413, whether
  announced by Content-Length or streamed in chunks (it is read here, up to
  the limit, and handed on whole).
- JSON the parser would choke on (nested deeper than Python's recursion, an
  integer of more digits than ``int()`` takes) is a 400 naming the problem.

Connection level (``uvicorn_options``, used by run.py): a cap on open
connections below the process's file-descriptor limit (connections over it are
closed at once: 1,100 slow clients locked out every other one at the common
limit of 1,024), a deadline for a request's headers (slowloris), and
rate-limited error logging (such clients wrote 425 MB of log a minute).
"""
from __future__ import annotations

import ipaddress
import json
import logging
import resource
import time

from .schemas import error_body

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
FD_RESERVE = 64          # descriptors kept for the model, logs and the process itself


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_name(header: str) -> str:
    """The name part of a Host header ('[::1]:8080' -> '[::1]', 'a:80' -> 'a')."""
    if header.startswith("["):
        return header[:header.find("]") + 1] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class _Refused(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.body = status, error_body(message, "invalid_request_error", param, code)


class RequestGuard:
    """ASGI middleware: the HTTP-level checks above, before the app sees a request."""

    def __init__(self, app, *, loopback_only: bool, host_allow: tuple[str, ...] = (),
                 max_body_bytes: int = 8 << 20, body_timeout_s: float = 60.0) -> None:
        self.app = app
        self.loopback_only = loopback_only and "*" not in host_allow
        self.host_allow = frozenset(h.lower() for h in host_allow)
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        try:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                       for k, v in scope.get("headers", ())}
            self._check_host(headers.get("host", ""))
            if scope["method"] in ("POST", "PUT", "PATCH"):
                self._check_type(headers.get("content-type", ""))
                body = await self._read_body(headers, receive)
                self._check_json(body)
                receive = _replay(body, receive)
        except _Refused as e:
            return await _answer(send, e.status, e.body)
        return await self.app(scope, receive, send)

    def _check_host(self, header: str) -> None:
        if not self.loopback_only:
            return
        name = _host_name(header.strip()).lower()
        if not (is_loopback(name) or name in self.host_allow):
            raise _Refused(403, f"Host {header!r} is not a loopback name; this server listens on "
                                "a loopback address (allow other names with --host-allow)",
                           "Host", "host_not_allowed")

    @staticmethod
    def _check_type(header: str) -> None:
        kind = header.split(";", 1)[0].strip().lower()
        if kind != "application/json" and not (kind.startswith("application/")
                                               and kind.endswith("+json")):
            raise _Refused(415, f"the body must be JSON (Content-Type: application/json), "
                                f"got {header or 'no Content-Type'!r}", "Content-Type",
                           "unsupported_media_type")

    async def _read_body(self, headers: dict, receive) -> bytes:
        limit = self.max_body_bytes
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise _Refused(413, f"the body is {int(declared):,} bytes, over this server's limit "
                                f"of {limit:,} (--max-body-mib)", None, "body_too_large")
        parts, n, deadline = [], 0, time.monotonic() + self.body_timeout_s
        while True:
            message = await receive()
            if message["type"] != "http.request":      # the client left
                break
            chunk = message.get("body", b"")
            n += len(chunk)
            if n > limit:
                raise _Refused(413, f"the body is over this server's limit of {limit:,} bytes "
                                    "(--max-body-mib)", None, "body_too_large")
            parts.append(chunk)
            if not message.get("more_body"):
                break
            if time.monotonic() > deadline:
                raise _Refused(408, f"the body took more than {self.body_timeout_s:g} s to arrive",
                               None, "timeout")
        return b"".join(parts)

    @staticmethod
    def _check_json(body: bytes) -> None:
        try:
            json.loads(body)
        except RecursionError:
            raise _Refused(400, "the JSON body nests too deep", None, "invalid_json") from None
        except ValueError as e:
            if "digits" in str(e):      # int() refuses over sys.get_int_max_str_digits()
                raise _Refused(400, f"the JSON body holds an integer that is too long: {e}",
                               None, "invalid_json") from None
            # a malformed body is the app's to report (it names the position)


def _replay(body: bytes, receive):
    """A receive that gives body once, then the client's own messages (disconnects)."""
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()
    return replay


async def _answer(send, status: int, body: dict) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": data})


# ---------------------------------------------------------------- connections

def connection_cap(wanted: int) -> int:
    """wanted, lowered to the descriptors this process may open less FD_RESERVE."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - FD_RESERVE))


class RateLimit(logging.Filter):
    """Lets through at most `burst` records per `window_s` seconds, then one
    line saying how many were dropped."""

    def __init__(self, burst: int = 20, window_s: float = 10.0) -> None:
        super().__init__()
        self.burst, self.window_s = burst, window_s
        self.start, self.count, self.dropped = 0.0, 0, 0

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        if now - self.start > self.window_s:
            if self.dropped:
                record.msg = f"({self.dropped} log lines dropped) {record.msg}"
            self.start, self.count, self.dropped = now, 0, 0
        self.count += 1
        if self.count > self.burst:
            self.dropped += 1
            return False
        return True


def guarded_protocol(max_connections: int, header_timeout_s: float):
    """uvicorn's h11 protocol, closing connections over max_connections at once
    and connections that go header_timeout_s without a request in progress or
    a new one (headers sent a byte at a time never make a request)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._seen, self._timer = None, None
            if len(self.connections) > max_connections:
                self.logger.warning("connection refused: %d open, the limit is %d",
                                    len(self.connections) - 1, max_connections)
                transport.close()
                return
            self._timer = self.loop.call_later(header_timeout_s, self._check_idle)

        def _check_idle(self) -> None:
            cycle = self.cycle
            if self.transport.is_closing():
                return
            if (cycle is not None and not cycle.response_complete) or cycle is not self._seen:
                self._seen = cycle
                self._timer = self.loop.call_later(header_timeout_s, self._check_idle)
                return
            self.transport.close()

        def connection_lost(self, exc) -> None:
            if getattr(self, "_timer", None) is not None:
                self._timer.cancel()
            super().connection_lost(exc)

    return GuardedH11


def uvicorn_options(max_connections: int, header_timeout_s: float) -> dict:
    """uvicorn.Config arguments for the guards above (the log filter is installed too)."""
    cap = connection_cap(max_connections)
    for name in ("uvicorn.error", "uvicorn"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RateLimit) for f in logger.filters):
            logger.addFilter(RateLimit())
    return {"http": guarded_protocol(cap, header_timeout_s), "limit_concurrency": cap,
            "timeout_keep_alive": 5, "h11_max_incomplete_event_size": 64 << 10}
