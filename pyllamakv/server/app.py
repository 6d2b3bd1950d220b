"""The HTTP side: FastAPI routes over a SlotPool.

OpenAI's paths (``/v1/...``) and llama-server's un-prefixed twins answer the
same (but ``/completions``, llama-server's native completion as there);
llama-server's own endpoints are in native.py. A generation request is
parsed and checked here (400 before it queues) and run by generation.py;
``--embedding`` makes an embedding server (``/v1/embeddings``; generation
answers 501, as llama-server's). Keys: ``Authorization: Bearer KEY`` or
``X-Api-Key: KEY``. CORS is off unless ``--cors-origins`` names origins: a
page a user visits must not drive a key-less local server.
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import json
import os
import time
from pathlib import Path

import numpy as np
from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from . import native, shapes
from .embeddings import EmbeddingRequest
from .generation import ApiError, Generation, OpenAIShape, engine_error
from .guards import RequestGuard, is_loopback
from .unhonoured import unhonoured
from .metrics import CONTENT_TYPE, Metrics
from .observe import RequestLog
from .schemas import ChatRequest, CompletionRequest, Unsupported, error_body, with_defaults
from .settings import ServerSettings
from .engines import load_engines
from .slots import Job, QueueFull, SlotPool

INDEX = Path(__file__).resolve().parent / "static" / "index.html"


# ---------------------------------------------------------------- request bodies

async def parse(request: Request, model):
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
                                           code=cause.code)) from None
        msg = err["msg"].removeprefix("Value error, ")
        raise ApiError(400, error_body(f"{where}: {msg}" if where else msg, param=param,
                                       code="invalid_value")) from None


def not_supported(what: str, start: str) -> ApiError:
    return ApiError(501, error_body(f"this server does not support {what}: start it "
                                    f"{start}", "not_supported_error"))


# ---------------------------------------------------------------- app

def create_app(settings: ServerSettings, pool: SlotPool | None = None) -> FastAPI:
    """The app over pool; pool=None loads settings.parallel slots (closed at shutdown)."""
    own = pool is None
    pool = pool or SlotPool(load_engines(settings), settings.queue_size)
    metrics = Metrics(pool)
    pool.on_done = metrics.job_done
    engine = pool.slots[0].engine
    model_path = getattr(engine, "model_path", "model")
    # --alias a,b,c: several names; the first in sorted order is the id (llama-server's)
    aliases = sorted({a.strip() for a in (settings.model_alias or "").split(",") if a.strip()})
    alias = aliases[0] if aliases else Path(model_path).name
    fp = shapes.fingerprint(model_path, settings.n_ctx)
    created = int(time.time())
    gen = Generation(pool, settings.timeout_s, settings.n_ctx)

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
    app.state.alias, app.state.generation = alias, gen
    keys = [k.encode() for k in settings.keys]

    async def auth(request: Request) -> None:
        if not keys:
            return
        bearer = request.headers.get("authorization", "")
        got = (bearer.removeprefix("Bearer ") if bearer.startswith("Bearer ")
               else request.headers.get("x-api-key", "")).encode()
        if not any(hmac.compare_digest(got, k) for k in keys):   # every key compared
            raise ApiError(401, error_body("missing or wrong API key (Authorization: Bearer "
                                           "<key>, or X-Api-Key: <key>)", "authentication_error",
                                           code="invalid_api_key"))

    @app.exception_handler(ApiError)
    async def _api_error(request, e: ApiError):
        return JSONResponse(e.body, e.status, headers=e.headers)

    @app.exception_handler(HTTPException)
    async def _http_error(request, e: HTTPException):
        return JSONResponse(error_body(str(e.detail), "invalid_request_error"), e.status_code)

    @app.exception_handler(Exception)
    async def _unexpected(request, e: Exception):
        return JSONResponse(error_body(f"{type(e).__name__}: {e}", "server_error"), 500)

    async def generate(request: Request, chat: bool):
        if settings.embedding:
            raise not_supported("completions", "without --embedding")
        body = with_defaults(await parse(request, ChatRequest if chat else CompletionRequest),
                             settings)
        top_n = (body.top_logprobs or 0) if chat else 0
        shape = OpenAIShape(chat, fp, top_n, body.stream and body.include_usage)
        return await gen.respond(request, body, chat, body.model or alias, shape)

    async def completions(request: Request):
        return await generate(request, chat=False)

    async def chat_completions(request: Request):
        return await generate(request, chat=True)

    async def models():
        meta = {"n_ctx": engine.n_ctx(), "parallel": len(pool.slots)} \
            if hasattr(engine, "n_ctx") else {}
        return {"object": "list", "data": [{"id": alias, "object": "model", "created": created,
                                            "owned_by": "pyllamakv", "meta": meta,
                                            "aliases": aliases or [alias],
                                            "tags": list(settings.tags)}]}

    async def embeddings(request: Request):
        if not settings.embedding:
            raise not_supported("embeddings", "with --embedding")
        body = await parse(request, EmbeddingRequest)
        job = Job(lambda slot, job: iter([slot.create_embedding(body.input,
                                                               body.model or alias)]),
                  asyncio.get_running_loop(), settings.timeout_s)
        request.state.jobs = [job]
        try:
            pool.submit(job)
        except QueueFull as e:
            raise ApiError(503, error_body(str(e), "server_error", code="queue_full"),
                           {"Retry-After": "1"}) from None
        kind, out = await gen.next_item(job, request)
        if kind == "error":
            raise engine_error(out, "input")
        if body.encoding_format == "base64":
            for d in out["data"]:
                d["embedding"] = base64.b64encode(
                    np.asarray(d["embedding"], "<f4").tobytes()).decode()
        return out

    # OpenAI's paths and llama-server's un-prefixed twins (its /completions is its native
    # /completion, as there: native.py)
    routes = ((completions, "/v1/completions", ["POST"]),
              (chat_completions, "/chat/completions", ["POST"]),
              (models, "/models", ["GET"]), (embeddings, "/embeddings", ["POST"]))
    for fn, path, methods in routes:
        for p in {path, "/v1" + path.removeprefix("/v1")}:
            app.add_api_route(p, fn, methods=methods, dependencies=[Depends(auth)])

    if settings.metrics:
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

    if settings.ui:
        @app.get("/", response_class=HTMLResponse)
        async def index():
            return HTMLResponse(INDEX.read_text(encoding="utf-8"))

    native.add_routes(app, settings, auth, parse, fp)
    app.add_middleware(RequestLog, metrics=metrics)
    if settings.cors_origins:
        from .cors import cors_options, CORS
        app.add_middleware(CORS, **cors_options(settings.cors_origins))
    return app
