"""OpenAI's response fields the library's dicts do not carry, added on the way out.

The library returns llama-cpp-python's dicts (api/response.py). OpenAI's
server answers have a few more fields that clients read:

- ``system_fingerprint`` on every response and chunk: this server's build and
  model (``fingerprint``);
- ``usage.prompt_tokens_details.cached_tokens``: the prompt tokens the slot
  reused from its previous request (the longest common prefix);
- chat ``logprobs`` as OpenAI's ``{"content": [{"token", "logprob", "bytes",
  "top_logprobs": [...]}]}`` rather than the text completion's lists;
- the first streamed chat chunk carries ``content: null`` beside the role (as
  llama-server's; clients that read ``delta["content"]`` find the key);
- ``stream_options.include_usage``: ``usage: null`` on every chunk and a last
  chunk with no choices and the usage (``usage_chunk``).
"""
from __future__ import annotations

import hashlib

from .. import __version__


def fingerprint(model_path: str, n_ctx: int) -> str:
    """b<version>-<digest of version, model, context>: llama-server's form (b<build>-<commit>)."""
    key = f"pyllamakv {__version__} {model_path} {n_ctx}".encode()
    return f"b{__version__}-{hashlib.sha256(key).hexdigest()[:10]}"


def usage_dict(prompt: int, completion: int, cached: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def _entry(token: str, logprob: float) -> dict:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}


def chat_logprobs(lp: dict | None, top_n: int) -> dict | None:
    """OpenAI's chat logprobs from llama-cpp-python's lists (None stays None)."""
    if lp is None or "content" in lp:
        return lp
    content = []
    for token, logprob, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        best = sorted((top or {}).items(), key=lambda kv: -kv[1])[:top_n]
        content.append({**_entry(token, logprob),
                        "top_logprobs": [_entry(t, v) for t, v in best]})
    return {"content": content, "refusal": None}


def _drop_ids(choices: list) -> None:
    """The ids the slots add to logprobs for llama-server's n_probs: not OpenAI's."""
    for c in choices:
        lp = c.get("logprobs")
        if isinstance(lp, dict):
            lp.pop("token_ids", None)
            lp.pop("top_ids", None)


def finish_response(out: dict, chat: bool, fp: str, cached: int, top_n: int) -> dict:
    """A whole (non-streamed) response with OpenAI's extra fields."""
    out["system_fingerprint"] = fp
    _drop_ids(out.get("choices", []))
    u = out.get("usage")
    if u is not None:
        out["usage"] = usage_dict(u["prompt_tokens"], u["completion_tokens"], cached)
    if chat:
        for c in out["choices"]:
            c["logprobs"] = chat_logprobs(c.get("logprobs"), top_n)
    return out


def finish_chunk(chunk: dict, chat: bool, fp: str, top_n: int, include_usage: bool) -> dict:
    """A stream chunk with OpenAI's extra fields."""
    chunk["system_fingerprint"] = fp
    _drop_ids(chunk.get("choices", []))
    if include_usage:
        chunk["usage"] = None
    if chat:
        for c in chunk["choices"]:
            c["logprobs"] = chat_logprobs(c.get("logprobs"), top_n)
            d = c.get("delta", {})
            if d.get("role") and "content" not in d:
                d["content"] = None      # clients that read content from the first chunk
    return chunk


def usage_chunk(first: dict, usage: dict) -> dict:
    """The last chunk of a stream with include_usage: no choices, the usage."""
    return {"id": first["id"], "object": first["object"], "created": first["created"],
            "model": first["model"], "system_fingerprint": first.get("system_fingerprint"),
            "choices": [], "usage": usage}
