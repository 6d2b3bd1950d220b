"""llama-server's own endpoints, beside OpenAI's: what its clients call.

- ``POST /completion``: llama-server's native request (``n_predict``,
  ``n_probs``, ``grammar``, ``json_schema``, ...) and answer (``content``,
  ``stop``, ``stop_type``, ``tokens_predicted``, ``timings``, ...); streamed as
  one ``{"content": ..., "stop": false}`` event per piece and a last event
  with ``stop: true`` and the figures (no ``[DONE]``, as llama-server).
- ``POST /tokenize`` / ``/detokenize``, ``POST /apply-template`` (the chat
  template's prompt), ``POST /chat/completions/input_tokens`` (its token
  count), ``GET /props``, ``GET /slots`` (with ``--slots``).
- ``POST /infill``: where the model's GGUF names FIM tokens; else 501.

Fields llama-server has and this server cannot honour (``ignore_eos``,
``samplers``, a chosen ``id_slot``, ...) are refused by name.
"""
from __future__ import annotations

import asyncio
from typing import Any

from fastapi import Depends, FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .engines import memory_layout
from .generation import ApiError
from .schemas import CompletionRequest, Message, Unsupported, error_body, with_defaults

NATIVE_REFUSED = {"ignore_eos": False, "samplers": None, "id_slot": -1, "n_indent": 0,
                  "lora": None, "dry_multiplier": 0.0, "xtc_probability": 0.0,
                  "mirostat": 0, "n_discard": 0, "image_data": None, "multimodal_data": None}


class NativeCompletion(CompletionRequest):
    """/completion's body: llama-server's names mapped onto the OpenAI request's."""
    cache_prompt: bool = True
    return_tokens: bool = False
    n_probs: int | None = Field(default=None, ge=0, le=20)   # becomes logprobs (below)

    @model_validator(mode="before")
    @classmethod
    def _native(cls, body):
        if not isinstance(body, dict):
            return body
        body = dict(body)
        for k, default in NATIVE_REFUSED.items():
            if body.get(k) not in (None, default):
                raise Unsupported(k, f"{k} is not supported by this server (got {body[k]!r})")
            body.pop(k, None)
        if "n_predict" in body:
            n = body.pop("n_predict")
            body["max_tokens"] = None if isinstance(n, int) and n < 0 else n
        if "n_probs" in body:
            n = body.pop("n_probs")
            body["logprobs"] = n if n else None
        if isinstance(body.get("logit_bias"), list):      # [[token, bias], ...]
            bias = {}
            for pair in body["logit_bias"]:
                if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], int)):
                    raise ValueError("logit_bias as a list holds [token_id, bias] pairs")
                bias[str(pair[0])] = -100.0 if pair[1] is False else float(pair[1])
            body["logit_bias"] = bias
        return body


class NativeShape:
    """llama-server's /completion answer from the library's text_completion dicts."""
    native = True
    include_usage = False

    def __init__(self, model: str, n_ctx: int, body: NativeCompletion, tokenizer=None):
        self.model, self.n_ctx, self.body, self.tokenizer = model, n_ctx, body, tokenizer

    def _figures(self, job, reason: str | None) -> dict:
        gen_ms = ((job.t_last - job.t_first) * 1000) if job.t_first is not None else 0.0
        pre_ms = ((job.t_first - job.t_run) * 1000) if job.t_first is not None else 0.0
        n = job.completion_tokens
        stop_type = {"length": "limit", None: "none"}.get(
            reason, "eos" if job.generated_tokens > job.completion_tokens else "word")
        return {"id_slot": 0, "stop": True, "model": self.model, "tokens_predicted": n,
                "tokens_evaluated": job.prompt_tokens, "tokens_cached": job.cached_tokens,
                "truncated": False, "stop_type": stop_type, "stopping_word": "",
                "generation_settings": {"n_ctx": self.n_ctx, "temperature": self.body.temperature,
                                        "top_k": self.body.top_k, "top_p": self.body.top_p,
                                        "min_p": self.body.min_p, "seed": self.body.seed,
                                        "n_predict": self.body.max_tokens or -1},
                "timings": {"prompt_n": job.prompt_tokens - job.cached_tokens,
                            "prompt_ms": pre_ms, "cache_n": job.cached_tokens,
                            "predicted_n": n, "predicted_ms": gen_ms,
                            "predicted_per_second": n / gen_ms * 1000 if gen_ms > 0 else 0.0}}

    def _probs(self, lp: dict | None) -> list[dict]:
        """llama-server's completion_probabilities: per token its id, text, logprob
        and bytes, and the n_probs likeliest (top_ids: completion.LogprobTracker)."""
        out = []
        keys = ("tokens", "token_ids", "token_logprobs", "top_ids")
        for tok, tid, logp, top in zip(*[(lp or {}).get(k, []) for k in keys]):
            best = sorted((top or {}).items(), key=lambda kv: -kv[1])[:self.body.logprobs]
            out.append({"id": tid, "token": tok, "logprob": logp, "bytes": list(tok.encode()),
                        "top_logprobs": [self._entry(i, v) for i, v in best]})
        return out

    def _entry(self, token_id: int, logprob: float) -> dict:
        raw = self.tokenizer.decode([token_id], special=True) if self.tokenizer else b""
        return {"id": token_id, "token": raw.decode("utf-8", "replace"), "logprob": logprob,
                "bytes": list(raw)}

    def whole(self, out: dict, job) -> dict:
        c = out["choices"][0]
        res = {"index": 0, "content": c["text"], "tokens": [],
               "has_new_line": "\n" in c["text"], **self._figures(job, c["finish_reason"])}
        if self.body.logprobs:
            res["completion_probabilities"] = self._probs(c.get("logprobs"))
        return res

    def chunk(self, chunk: dict, job) -> dict:
        c = chunk["choices"][0]
        if c["finish_reason"] is None:
            res = {"index": 0, "content": c["text"], "tokens": [], "stop": False,
                   "id_slot": 0, "tokens_predicted": job.completion_tokens,
                   "tokens_evaluated": job.prompt_tokens}
        else:
            res = {"index": 0, "content": c["text"], "tokens": [],
                   **self._figures(job, c["finish_reason"])}
        if self.body.logprobs:
            res["completion_probabilities"] = self._probs(c.get("logprobs"))
        return res


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    content: str
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    tokens: list[int]


class TemplateRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    messages: list[Message] = Field(min_length=1)


class InfillRequest(NativeCompletion):
    prompt: Any = ""
    input_prefix: str = ""
    input_suffix: str = ""
    input_extra: list[dict] | None = None


FIM = ("tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
       "tokenizer.ggml.fim_mid_token_id")


def add_routes(app: FastAPI, settings, auth, parse, fp: str) -> None:
    pool, gen, alias = app.state.pool, app.state.generation, app.state.alias
    engine = pool.slots[0].engine
    tok = getattr(engine, "tokenizer", None)     # None: a stand-in engine (tests)
    deps = [Depends(auth)]
    meta = getattr(engine, "metadata", {}) or {}
    fim = [int(meta[k]) for k in FIM if k in meta]
    layout = memory_layout([s.engine for s in pool.slots])   # one pool, or one per slot

    async def native_completion(request: Request, body: NativeCompletion, prompt=None):
        if settings.embedding:
            raise ApiError(501, error_body("this server does not support completions: start "
                                           "it without --embedding", "not_supported_error"))
        if prompt is not None:
            body.prompt = prompt
        body = with_defaults(body, settings)
        return await gen.respond(request, body, False, alias,
                                 NativeShape(alias, settings.n_ctx, body, tok),
                                 merge=lambda outs, parts: outs[0] if len(outs) == 1 else outs)

    @app.post("/completion", dependencies=deps)
    @app.post("/completions", dependencies=deps)
    async def completion(request: Request):
        return await native_completion(request, await parse(request, NativeCompletion))

    @app.post("/infill", dependencies=deps)
    async def infill(request: Request):
        if len(fim) < 3:
            raise ApiError(501, error_body("this model has no fill-in-the-middle tokens "
                                           "(tokenizer.ggml.fim_*_token_id): /infill needs "
                                           "a FIM model", "not_supported_error"))
        body = await parse(request, InfillRequest)
        pre, suf, mid = fim
        prompt = ([pre] + tok.encode(body.input_prefix, add_bos=False) + [suf]
                  + tok.encode(body.input_suffix, add_bos=False) + [mid]
                  + (tok.encode(body.prompt, add_bos=False) if body.prompt else []))
        return await native_completion(request, body, prompt)

    @app.post("/tokenize", dependencies=deps)
    async def tokenize(request: Request):
        body = await parse(request, TokenizeRequest)
        ids = await asyncio.to_thread(tok.encode, body.content, body.add_special,
                                      body.parse_special)
        if not body.with_pieces:
            return {"tokens": ids}
        out = []
        for i in ids:
            raw = tok.decode([i], special=True)
            try:
                piece: Any = raw.decode("utf-8")
            except UnicodeDecodeError:
                piece = list(raw)
            out.append({"id": i, "piece": piece})
        return {"tokens": out}

    @app.post("/detokenize", dependencies=deps)
    async def detokenize(request: Request):
        body = await parse(request, DetokenizeRequest)
        bad = [t for t in body.tokens if not 0 <= t < engine.n_vocab()]
        if bad:
            raise ApiError(400, error_body(f"token ids out of the vocabulary: {bad[:8]}",
                                           param="tokens", code="invalid_value"))
        text = tok.decode(body.tokens, special=True).decode("utf-8", "replace")
        return {"content": text}

    @app.post("/apply-template", dependencies=deps)
    async def apply_template(request: Request):
        body = await parse(request, TemplateRequest)
        try:
            prompt = engine.apply_template([m.as_dict() for m in body.messages])
        except ValueError as e:
            raise ApiError(400, error_body(str(e), param="messages")) from None
        return {"prompt": prompt}

    @app.post("/chat/completions/input_tokens", dependencies=deps)
    @app.post("/v1/chat/completions/input_tokens", dependencies=deps)
    async def input_tokens(request: Request):
        """The prompt tokens a chat request's messages make (llama-server's count)."""
        prompt = (await apply_template(request))["prompt"]
        ids = await asyncio.to_thread(tok.encode, prompt, True, True)
        return {"input_tokens": len(ids)}

    @app.get("/props", dependencies=deps)
    async def props():
        return {"default_generation_settings": {
                    "n_ctx": settings.n_ctx, "params": {
                        "temperature": settings.temperature, "seed": settings.seed,
                        "n_predict": settings.n_predict or -1}},
                "total_slots": len(pool.slots), "model_alias": alias,
                "model_path": getattr(engine, "model_path", ""),
                "chat_template": getattr(engine, "chat_template", ""),
                "modalities": {"vision": False, "audio": False},
                "system_fingerprint": fp, "build_info": f"pyllamakv {fp}",
                "endpoint_slots": settings.slots_endpoint, "endpoint_metrics": settings.metrics,
                "kv_cache": layout}

    @app.get("/slots", dependencies=deps)
    async def slots():
        if not settings.slots_endpoint:
            raise ApiError(501, error_body("this server does not show its slots: start it "
                                           "with --slots", "not_supported_error"))
        return [{"id": s.index, "n_ctx": settings.n_ctx, "is_processing": s.busy,
                 "n_jobs": s.n_jobs} for s in pool.slots]
