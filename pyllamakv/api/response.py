"""OpenAI-style return values: completion and chat dicts and their stream chunks.

The generation loop (completion.py) yields ``Piece``s: text that is safe to
show with the logprobs of the tokens it came from; the last piece carries the
finish reason. The builders turn pieces into llama-cpp-python's formats. A
non-streamed result is the concatenation of the streamed pieces, so the two
always agree.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Iterator


@dataclass(slots=True)
class Piece:
    text: str                                   # safe to emit
    logprobs: dict | None = None                # per-token lists for these tokens
    finish_reason: str | None = None            # set on the last piece only


@dataclass(slots=True)
class Usage:
    """Token counts, filled in while the pieces are produced."""
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def as_dict(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens}


def empty_logprobs() -> dict:
    return {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}


def chat_logprobs(lp: dict | None) -> dict | None:
    """A completion's logprobs lists in OpenAI's chat layout: {"content": [{"token",
    "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}, ...]}, ...]}."""
    if lp is None:
        return None

    def entry(token: str, logprob: float) -> dict:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}
    content = []
    for token, logprob, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        tops = sorted((top or {}).items(), key=lambda kv: -kv[1])
        content.append({**entry(token, logprob),
                        "top_logprobs": [entry(t, v) for t, v in tops]})
    return {"content": content, "refusal": None}


def merge_logprobs(into: dict, part: dict | None) -> None:
    if part:
        for k, v in part.items():
            into.setdefault(k, []).extend(v)


# ---------------------------------------------------------------- text completion

def _new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def completion_chunks(pieces: Iterator[Piece], model: str, usage: Usage,
                      want_logprobs: bool) -> Iterator[dict]:
    """``text_completion`` chunks: one per non-empty piece, then one with the reason."""
    cid, created = _new_id("cmpl"), int(time.time())
    for p in pieces:
        if not p.text and p.finish_reason is None and not (want_logprobs and p.logprobs):
            continue
        yield {"id": cid, "object": "text_completion", "created": created, "model": model,
               "choices": [{"text": p.text, "index": 0,
                            "logprobs": (p.logprobs or empty_logprobs()) if want_logprobs else None,
                            "finish_reason": p.finish_reason}]}


def completion_response(pieces: Iterator[Piece], model: str, usage: Usage,
                        want_logprobs: bool) -> dict:
    """One ``text_completion`` dict from all the pieces."""
    texts, logprobs, reason = [], empty_logprobs(), None
    for p in pieces:
        texts.append(p.text)
        merge_logprobs(logprobs, p.logprobs)
        reason = p.finish_reason or reason
    return {"id": _new_id("cmpl"), "object": "text_completion", "created": int(time.time()),
            "model": model,
            "choices": [{"text": "".join(texts), "index": 0,
                         "logprobs": logprobs if want_logprobs else None,
                         "finish_reason": reason}],
            "usage": usage.as_dict()}


# ---------------------------------------------------------------- chat completion

def chat_chunks(pieces: Iterator[Piece], model: str, usage: Usage,
                want_logprobs: bool) -> Iterator[dict]:
    """``chat.completion.chunk``s: the role first, then content deltas, then the reason."""
    cid, created = _new_id("chatcmpl"), int(time.time())

    def chunk(delta: dict, reason: str | None, logprobs=None) -> dict:
        return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": logprobs,
                             "finish_reason": reason}]}

    yield chunk({"role": "assistant"}, None)
    for p in pieces:
        if p.text:
            yield chunk({"content": p.text}, None,
                        chat_logprobs(p.logprobs or empty_logprobs()) if want_logprobs else None)
        if p.finish_reason is not None:
            yield chunk({}, p.finish_reason)


def chat_response(pieces: Iterator[Piece], model: str, usage: Usage,
                  want_logprobs: bool) -> dict:
    """One ``chat.completion`` dict from all the pieces."""
    c = completion_response(pieces, model, usage, want_logprobs)
    choice = c["choices"][0]
    return {"id": "chat" + c["id"], "object": "chat.completion", "created": c["created"],
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": choice["text"]},
                         "logprobs": chat_logprobs(choice["logprobs"]),
                         "finish_reason": choice["finish_reason"]}],
            "usage": c["usage"]}


# ---------------------------------------------------------------- tool calls

def with_tool_calls(reply: dict, plan) -> dict:
    """A chat.completion whose text is parsed for tool calls (tools.ToolPlan)."""
    from .tools import parse_tool_calls
    choice = reply["choices"][0]
    content, calls = parse_tool_calls(choice["message"]["content"], plan)
    if calls:
        message = {"role": "assistant", "content": content, "tool_calls": calls}
        if plan.legacy:
            message["function_call"] = calls[0]["function"]
        choice["message"] = message
        choice["finish_reason"] = "tool_calls"
    return reply
