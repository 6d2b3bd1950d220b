"""The HTTP side: FastAPI routes over a SlotPool.

A generation request is parsed and checked here (400 before it queues), put
in the pool as a Job (503 with Retry-After when the queue is full), and its
first item decides the answer: an error becomes OpenAI-style error JSON with
the right status, anything else the response (or the first SSE event, then
the rest as the slot produces them and `data: [DONE]`). A client that goes
away cancels its job, which frees the slot before its next token.
"""
from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import math
import os
import time
from pathlib import Path

from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import ValidationError
from sse_starlette import EventSourceResponse
from starlette.exceptions import HTTPException

from . import fanout
from .guards import RequestGuard, is_loopback
from .unhonoured import unhonoured
from .metrics import CONTENT_TYPE, Metrics
from .schemas import ChatRequest, CompletionRequest, Unsupported, error_body
from .settings import ServerSettings
from .slots import Job, JobStopped, QueueFull, SlotPool, load_engines
from .speculation import SpecRequest, check_available, drafting

INDEX = Path(__file__).resolve().parent / "static" / "index.html"
POLL_S = 0.25         # how often a waiting request checks that its client is still there


class ApiError(Exception):
    def __init__(self, status: int, body: dict, headers: dict | None = None):
        super().__init__(body["error"]["message"])
        self.status, self.body, self.headers = status, body, headers


def _json(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


# ---------------------------------------------------------------- request -> job

async def _parse(request: Request, model):
    raw = await request.body()
    try:
        obj = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ApiError(400, error_body(f"could not parse the JSON body: {e}")) from None
    if not isinstance(obj, dict):
        raise ApiError(400, error_body("the body must be a JSON object"))
    refused = unhonoured(obj, model)
    if refused is not None:
        raise ApiError(400, error_body(f"{refused[0]} ({refused[1]}) is not supported by this "
                                       "server", param=refused[0], code="unsupported_parameter"))
    try:
        return model.model_validate(obj)
    except ValidationError as e:
        err = e.errors()[0]
        cause = (err.get("ctx") or {}).get("error")
        where = ".".join(str(x) for x in err["loc"]) or None   # e.g. messages.0.role
        param = str(err["loc"][0]) if err["loc"] else None
        if isinstance(cause, Unsupported):
            raise ApiError(400, error_body(str(cause), param=cause.param,
                                           code="unsupported_parameter")) from None
        msg = err["msg"].removeprefix("Value error, ")
        raise ApiError(400, error_body(f"{where}: {msg}" if where else msg, param=param,
                                       code="invalid_value")) from None


def _engine_error(e: BaseException, param: str) -> ApiError:
    if isinstance(e, JobStopped):
        return ApiError(503, error_body(str(e), "server_error", code="timeout"),
                        {"Retry-After": "1"})
    if isinstance(e, (ValueError, TypeError)):
        msg = str(e) or type(e).__name__
        code = "context_length_exceeded" if "context window" in msg else "invalid_value"
        return ApiError(400, error_body(msg, param=param if code != "invalid_value" else None,
                                        code=code))
    return ApiError(500, error_body(f"{type(e).__name__}: {e}", "server_error"))


def _run(chat: bool, kwargs: dict, stream: bool, model: str, spec: SpecRequest):
    """The job's function: the Llama call on the slot's engine, in the slot's thread."""
    def finish(out: dict, job: Job) -> dict:
        if job.stopped_early and job.timed_out:   # the time limit ended it, not the model
            for c in out["choices"]:
                if c.get("finish_reason") == "stop":
                    c["finish_reason"] = "length"
        return out

    def run(llm, job: Job):
        call = llm.create_chat_completion if chat else llm.create_completion
        if not stream:
            with drafting(llm, spec):
                out = call(**kwargs, stream=False, model=model)
            # yielded once the slot's drafters are as they were: the response
            # is this item, and its client may look at the slot right after
            yield finish(out, job)
            return
        with drafting(llm, spec):    # a stream ends with the job's "end", after this
            for chunk in call(**kwargs, stream=True, model=model):
                yield finish(chunk, job)
    return run


# ---------------------------------------------------------------- app

def create_app(settings: ServerSettings, pool: SlotPool | None = None) -> FastAPI:
    """The app over pool; pool=None loads settings.parallel slots (closed at shutdown)."""
    own = pool is None
    pool = pool or SlotPool(load_engines(settings), settings.queue_size)
    metrics = Metrics(pool)
    pool.on_done = metrics.job_done
    alias = settings.model_alias or Path(getattr(pool.slots[0].engine, "model_path", "model")).name
    created = int(time.time())

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        if own:
            await asyncio.to_thread(pool.close)

    app = FastAPI(title="pyllamakv", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None if settings.api_key else "/openapi.json")
    app.add_middleware(RequestGuard, loopback_only=is_loopback(settings.host),
                       host_allow=settings.host_allow, max_body_bytes=settings.max_body_bytes)
    app.state.pool, app.state.metrics, app.state.settings = pool, metrics, settings

    async def auth(request: Request) -> None:
        if settings.api_key is None:
            return
        got = request.headers.get("authorization", "")
        if not hmac.compare_digest(got.encode(), f"Bearer {settings.api_key}".encode()):
            raise ApiError(401, error_body("missing or wrong API key (Authorization: Bearer "
                                           "<key>)", "authentication_error",
                                           code="invalid_api_key"))

    @app.exception_handler(ApiError)
    async def _api_error(request, e: ApiError):
        metrics.requests.labels(request.url.path, str(e.status)).inc()
        return JSONResponse(e.body, e.status, headers=e.headers)

    @app.exception_handler(HTTPException)
    async def _http_error(request, e: HTTPException):
        return JSONResponse(error_body(str(e.detail), "invalid_request_error"), e.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(request, e: Exception):
        return JSONResponse(error_body(f"{type(e).__name__}: {e}", "server_error"), 500)

    async def next_item(job: Job, request: Request) -> tuple[str, object]:
        """The job's next item; cancels it if its client leaves or it outlives its limit."""
        while True:
            try:
                return await asyncio.wait_for(job.get(), POLL_S)
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    job.cancel()
                    pool.withdraw(job)
                    return "error", JobStopped("the client went away")
                if time.monotonic() > job.deadline and pool.withdraw(job):
                    job.cancel()
                    return "error", JobStopped("timed out waiting for a slot")
                if time.monotonic() > job.deadline + 60:   # a slot stuck in one decode call
                    job.cancel()
                    return "error", JobStopped("the request ran past its time limit")

    async def generate(request: Request, chat: bool):
        t0, endpoint = time.perf_counter(), request.url.path
        body = await _parse(request, ChatRequest if chat else CompletionRequest)
        param = "messages" if chat else "prompt"
        limit = min(settings.timeout_s, body.timeout or math.inf)
        spec = body.speculative()
        try:
            check_available(spec, pool.slots[0].engine)
        except ValueError as e:
            raise ApiError(400, error_body(str(e), param="speculative.type",
                                           code="invalid_value")) from None
        parts = fanout.split(body.kwargs(), body.n, chat)
        if len(parts) > len(pool.slots) + pool.queue_size:
            raise ApiError(400, error_body(
                f"{len(parts)} choices (n times the prompts) are more than this server's "
                f"{len(pool.slots)} slots and {pool.queue_size} queue places", param="n",
                code="invalid_value"))
        loop = asyncio.get_running_loop()
        jobs = [Job(_run(chat, part.kwargs, body.stream, body.model or alias,
                         spec), loop, limit) for part in parts]
        try:
            pool.submit_all(jobs)
        except QueueFull as e:
            raise ApiError(503, error_body(str(e), "server_error", code="queue_full"),
                           {"Retry-After": "1"}) from None

        ended: set[int] = set()      # jobs whose last item came: never cancelled (metrics)

        def stop_all() -> None:
            for k, job in enumerate(jobs):
                if k not in ended:
                    job.cancel()
                    pool.withdraw(job)

        if not body.stream:
            async def whole(k: int) -> dict:
                kind, item = await next_item(jobs[k], request)
                ended.add(k)        # the response is a job's last item
                if kind == "error":
                    raise _engine_error(item, param)
                return item
            try:      # the first part to fail fails the request and stops the others
                outs = await asyncio.gather(*(whole(k) for k in range(len(jobs))))
            finally:
                stop_all()
            metrics.requests.labels(endpoint, "200").inc()
            metrics.latency.labels(endpoint).observe(time.perf_counter() - t0)
            return JSONResponse(fanout.merge(outs, parts))

        # streamed: the first part's first item decides the status; then every part's
        # items as they come (each part's job ends with "end" or "error")
        kind, first = await next_item(jobs[0], request)
        if kind == "error":
            ended.add(0)
            stop_all()
            raise _engine_error(first, param)
        first_id = first.get("id") if len(parts) > 1 else None
        merged: asyncio.Queue = asyncio.Queue()

        async def pump(k: int) -> None:
            job = jobs[k]
            while True:
                kind, item = await next_item(job, request)
                if kind != "item":
                    ended.add(k)
                await merged.put((k, kind, item))
                if kind != "item":
                    return

        await merged.put((0, "item", first))
        pumps = [asyncio.create_task(pump(k)) for k in range(len(jobs))]

        async def events():
            status, left = "200", len(jobs)
            try:
                while left:
                    k, kind, item = await merged.get()
                    if kind == "end":
                        left -= 1
                        continue
                    if kind == "error":
                        e = _engine_error(item, param)
                        status = str(e.status)
                        yield _json(e.body)
                        break
                    data = _json(fanout.relabel(item, parts[k], first_id)
                                 if first_id is not None else item)
                    metrics.sse_bytes.inc(len(data.encode()) + 8)
                    yield data
                yield "[DONE]"
            finally:
                for t in pumps:
                    t.cancel()
                stop_all()    # frees the slots of jobs still running (the client left)
                metrics.requests.labels(endpoint, status).inc()
                metrics.latency.labels(endpoint).observe(time.perf_counter() - t0)

        return EventSourceResponse(events(), sep="\n", ping=15)

    @app.post("/v1/completions", dependencies=[Depends(auth)])
    async def completions(request: Request):
        return await generate(request, chat=False)

    @app.post("/v1/chat/completions", dependencies=[Depends(auth)])
    async def chat_completions(request: Request):
        return await generate(request, chat=True)

    @app.get("/v1/models", dependencies=[Depends(auth)])
    async def models():
        engine = pool.slots[0].engine
        meta = {"n_ctx": engine.n_ctx(), "parallel": len(pool.slots)} \
            if hasattr(engine, "n_ctx") else {}
        return {"object": "list", "data": [{"id": alias, "object": "model", "created": created,
                                            "owned_by": "pyllamakv", "meta": meta}]}

    @app.get("/metrics", dependencies=[Depends(auth)])
    async def prometheus():
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/health")
    async def health():
        pool.check_workers()
        busy = pool.busy
        out = {"status": "ok", "slots_idle": len(pool.slots) - busy, "slots_busy": busy,
               "queue_length": pool.queue_length, "slot_restarts": pool.restarts}
        if settings.api_key is None:       # no key: a local server, the pid helps tools
            out["pid"] = os.getpid()
        return out

    @app.get("/", response_class=HTMLResponse)
    async def index():
        return HTMLResponse(INDEX.read_text(encoding="utf-8"))

    return app
