"""A generation request, from its parsed body to its HTTP answer.

The body (schemas.py) becomes one job per choice (fanout.py) in the slot pool
(503 with Retry-After when the queue is full); the first item of the first
job decides the answer: an error becomes OpenAI-style error JSON with the
right status, anything else the response (or the first SSE event, then the
rest as the slots produce them and ``data: [DONE]``). A client that goes
away cancels its jobs, which frees their slots before their next token.
``shape`` turns the library's dicts into the endpoint's (OpenAI's by
default, shapes.py; llama-server's /completion: native.py).
"""
from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any, Callable

from fastapi import Request
from sse_starlette import EventSourceResponse
from starlette.responses import JSONResponse

from . import fanout, shapes
from ..errors import ContextFullError
from .schemas import error_body
from .slots import Job, JobStopped, QueueFull, SlotPool
from .speculation import SpecRequest, check_available, drafting

POLL_S = 0.25         # how often a waiting request checks that its client is still there


class ApiError(Exception):
    def __init__(self, status: int, body: dict, headers: dict | None = None):
        super().__init__(body["error"]["message"])
        self.status, self.body, self.headers = status, body, headers


def to_json(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def engine_error(e: BaseException, param: str, n_ctx: int | None = None) -> ApiError:
    if isinstance(e, JobStopped) and "went away" in str(e):   # nobody reads it: a cancel
        return ApiError(499, error_body(str(e), "server_error", code="cancelled"))
    if isinstance(e, JobStopped):
        return ApiError(503, error_body(str(e), "server_error", code="timeout"),
                        {"Retry-After": "1"})
    if isinstance(e, ContextFullError) or isinstance(e, ValueError) and "context window" in str(e):
        # OpenAI's code; llama-server's type and figures (its clients read them)
        body = error_body(str(e), "exceed_context_size_error", param, "context_length_exceeded")
        m = re.search(r"Requested tokens \((\d+)\)|at least ([\d,]+) tokens", str(e))
        body["error"]["n_prompt_tokens"] = int((m.group(1) or m.group(2)).replace(",", "")) \
            if m else None
        body["error"]["n_ctx"] = n_ctx
        return ApiError(400, body)
    if isinstance(e, (ValueError, TypeError)):
        msg = str(e) or type(e).__name__
        return ApiError(400, error_body(msg, code="invalid_value"))
    return ApiError(500, error_body(f"{type(e).__name__}: {e}", "server_error"))


class OpenAIShape:
    """The OpenAI endpoints' answers: the library's dicts with shapes.py's fields."""

    def __init__(self, chat: bool, fp: str, top_n: int, include_usage: bool):
        self.chat, self.fp, self.top_n, self.include_usage = chat, fp, top_n, include_usage

    def whole(self, out: dict, job: Job) -> dict:
        return shapes.finish_response(out, self.chat, self.fp, job.cached_tokens, self.top_n)

    def chunk(self, chunk: dict, job: Job) -> dict:
        return shapes.finish_chunk(chunk, self.chat, self.fp, self.top_n, self.include_usage)


def _run(chat: bool, kwargs: dict, stream: bool, model: str, spec: SpecRequest, shape):
    """The job's function: the call on the slot's engine (slot_engine.py), in the slot's thread."""
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
            yield shape.whole(finish(out, job), job)
            return
        with drafting(llm, spec):    # a stream ends with the job's "end", after this
            for chunk in call(**kwargs, stream=True, model=model):
                yield shape.chunk(finish(chunk, job), job)
    return run


def stream_usage(jobs: list[Job], parts: list[fanout.Part]) -> dict:
    """A streamed request's usage, from its jobs' counts (each prompt counted once)."""
    prompt = sum(j.prompt_tokens for j, p in zip(jobs, parts) if p.first_of_prompt)
    cached = sum(j.cached_tokens for j, p in zip(jobs, parts) if p.first_of_prompt)
    return shapes.usage_dict(prompt, sum(j.completion_tokens for j in jobs), cached)


class Generation:
    """Runs generation requests on pool; request.state.jobs: its jobs (observe.py)."""

    def __init__(self, pool: SlotPool, timeout_s: float, n_ctx: int | None = None):
        self.pool, self.timeout_s, self.n_ctx = pool, timeout_s, n_ctx

    async def next_item(self, job: Job, request: Request) -> tuple[str, object]:
        """The job's next item; cancels it if its client leaves or it outlives its limit."""
        pool = self.pool
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

    def check_spec(self, spec: SpecRequest) -> None:
        try:
            check_available(spec, self.pool.slots[0].engine)
        except ValueError as e:
            raise ApiError(400, error_body(str(e), param="speculative.type",
                                           code="invalid_value")) from None

    async def respond(self, request: Request, body: Any, chat: bool, model: str, shape,
                      merge: Callable = fanout.merge):
        """The answer to body (a parsed ChatRequest / CompletionRequest)."""
        pool = self.pool
        param = "messages" if chat else "prompt"
        limit = min(self.timeout_s, body.timeout or self.timeout_s)
        spec = body.speculative()
        self.check_spec(spec)
        parts = fanout.split(body.kwargs(), body.n, chat)
        if len(parts) > len(pool.slots) + pool.queue_size:
            raise ApiError(400, error_body(
                f"{len(parts)} choices (n times the prompts) are more than this server's "
                f"{len(pool.slots)} slots and {pool.queue_size} queue places", param="n",
                code="invalid_value"))
        loop = asyncio.get_running_loop()
        jobs = [Job(_run(chat, part.kwargs, body.stream, model, spec, shape), loop, limit)
                for part in parts]
        request.state.jobs = jobs
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
                kind, item = await self.next_item(jobs[k], request)
                ended.add(k)        # the response is a job's last item
                if kind == "error":
                    raise engine_error(item, param, self.n_ctx)
                return item
            try:      # the first part to fail fails the request and stops the others
                outs = await asyncio.gather(*(whole(k) for k in range(len(jobs))))
            finally:
                stop_all()
            out = merge(outs, parts)
            if len(outs) > 1 and "prompt_tokens_details" in (outs[0].get("usage") or {}):
                out["usage"] = stream_usage(jobs, parts)
            return JSONResponse(out)

        # streamed: the first part's first item decides the status; then every part's
        # items as they come (each part's job ends with "end" or "error")
        kind, first = await self.next_item(jobs[0], request)
        if kind == "error":
            ended.add(0)
            stop_all()
            raise engine_error(first, param, self.n_ctx)
        first_id = first.get("id") if len(parts) > 1 else None
        merged: asyncio.Queue = asyncio.Queue()

        async def pump(k: int) -> None:
            job = jobs[k]
            while True:
                kind, item = await self.next_item(job, request)
                if kind != "item":
                    ended.add(k)
                await merged.put((k, kind, item))
                if kind != "item":
                    return

        await merged.put((0, "item", first))
        pumps = [asyncio.create_task(pump(k)) for k in range(len(jobs))]
        native = getattr(shape, "native", False)

        async def events():
            status, left = 499, len(jobs)      # 499 until it ends: the client left
            try:
                while left:
                    k, kind, item = await merged.get()
                    if kind == "end":
                        left -= 1
                        continue
                    if kind == "error":
                        e = engine_error(item, param, self.n_ctx)
                        status = e.status
                        yield to_json(e.body)
                        break
                    yield to_json(fanout.relabel(item, parts[k], first_id)
                                  if first_id is not None else item)
                else:
                    status = 200
                    if getattr(shape, "include_usage", False):
                        yield to_json(shapes.usage_chunk(first, stream_usage(jobs, parts)))
                    if not native:
                        yield "[DONE]"
            finally:
                for t in pumps:
                    t.cancel()
                stop_all()    # frees the slots of jobs still running (the client left)
                request.state.status = status     # the request log's (observe.py)

        return EventSourceResponse(events(), sep="\n", ping=15)
