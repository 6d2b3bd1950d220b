"""One log line and the request metrics per HTTP request, as an ASGI middleware.

The line (logger ``pyllamakv.server``, at INFO; --log-level picks what shows):

    POST /v1/chat/completions 200 in=31 out=12 ttft=0.041s total=0.210s

``in`` / ``out``: prompt and generated tokens of the request's jobs (absent
for requests that generate nothing), ``ttft``: from the request's arrival to
its first sampled token, ``total``: to the last byte sent, so a stream is
logged when it ends. A stream's status is the one its events ended with
(generation.py sets ``state.status``): 499 when the client went away, which
/metrics counts as a cancellation, not as an error.

Written as plain ASGI rather than Starlette's BaseHTTPMiddleware, which
would buffer the disconnect messages the generation loop listens for.
"""
from __future__ import annotations

import logging
import time

log = logging.getLogger("pyllamakv.server")


class RequestLog:
    def __init__(self, app, metrics, skip=("/health",)):
        self.app, self.metrics, self.skip = app, metrics, set(skip)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = [500]

        async def sending(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self._done(scope, status[0], t0)

    def _done(self, scope, status: int, t0: float) -> None:
        total = time.perf_counter() - t0
        path = scope.get("path", "")
        state = scope.get("state") or {}
        status = state.get("status", status)
        jobs = state.get("jobs") or []
        fields = [scope.get("method", ""), path, str(status)]
        if jobs:
            fields.append(f"in={sum(j.prompt_tokens for j in jobs)}")
            fields.append(f"out={sum(j.generated_tokens for j in jobs)}")
            firsts = [j.t_first for j in jobs if j.t_first is not None]
            if firsts:
                fields.append(f"ttft={min(firsts) - min(j.t_start for j in jobs):.3f}s")
        fields.append(f"total={total:.3f}s")
        if path not in self.skip:
            log.log(logging.WARNING if status >= 500 else logging.INFO, " ".join(fields))
        route = scope.get("route")
        endpoint = getattr(route, "path", None)
        if endpoint is None or path in self.skip or path == "/metrics":
            return
        self.metrics.request_done(endpoint, status, total)


def setup_logging(level: str) -> None:
    """The request log on stderr at level (debug, info, warning, error)."""
    if not log.handlers:
        h = logging.StreamHandler()
        h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(h)
        log.propagate = False
    log.setLevel(level.upper())
