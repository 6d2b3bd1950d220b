"""One request as several jobs: n choices per prompt, and a prompt list, spread over slots.

OpenAI's completions take a list of prompts and ``n`` choices of each; its
chat completions ``n`` choices of the one conversation. Each choice here is a
job of its own (one prompt, one choice), so free slots generate them at once
instead of one slot running them one after another; a choice's text is the
text of a request for it alone (greedy: the same; seeded: see choice_seed).
The answer orders choices as OpenAI does: prompt p's i-th choice has
``index`` p * n + i. Usage counts each prompt once and every choice's tokens.

Streaming interleaves the parts' chunks as they come, each chunk's choice
carrying its index and every chunk the first part's id (one completion).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..api.prompt_list import is_prompt_list

MAX_N = 128          # OpenAI's bound on n
SEED_SPAN = 0xFFFFFFFF   # seeds are in [0, 0xFFFFFFFE]; 0xFFFFFFFF (and -1) mean random


@dataclass(slots=True, frozen=True)
class Part:
    """One choice of one prompt: its index in the answer and its call's kwargs."""
    index: int
    first_of_prompt: bool     # its prompt's tokens count in the usage (once per prompt)
    kwargs: dict


def choice_seed(seed: int | None, i: int) -> int | None:
    """Choice i's seed: the request's for choice 0, then the next ones (so n seeded
    choices differ, and each is reproduced by a request with its seed); random stays random."""
    if seed is None or seed in (-1, SEED_SPAN) or i == 0:
        return seed
    return (seed + i) % SEED_SPAN


def split(kwargs: dict, n: int, chat: bool) -> list[Part]:
    """The parts of a request whose (one-call) kwargs are kwargs."""
    prompts = [None] if chat or not is_prompt_list(kwargs["prompt"]) else kwargs["prompt"]
    parts = []
    for p, prompt in enumerate(prompts):
        for i in range(n):
            kw = dict(kwargs, seed=choice_seed(kwargs.get("seed"), i))
            if prompt is not None:
                kw["prompt"] = prompt
            parts.append(Part(p * n + i, i == 0, kw))
    return parts


def _choices(out: dict, index: int) -> list[dict]:
    return [dict(c, index=index) for c in out["choices"]]


def merge(outs: list[dict], parts: list[Part]) -> dict:
    """The answer of a request from its parts' answers (in parts' order)."""
    if len(outs) == 1:
        return outs[0]
    merged = dict(outs[0])
    merged["choices"] = [c for out, part in zip(outs, parts) for c in _choices(out, part.index)]
    merged["choices"].sort(key=lambda c: c["index"])
    usage = {"prompt_tokens": 0, "completion_tokens": 0}
    for out, part in zip(outs, parts):
        u = out.get("usage") or {}
        if part.first_of_prompt:
            usage["prompt_tokens"] += u.get("prompt_tokens", 0)
        usage["completion_tokens"] += u.get("completion_tokens", 0)
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    merged["usage"] = usage
    return merged


def relabel(chunk: dict, part: Part, first_id: str | None) -> dict:
    """A part's stream chunk as a chunk of the whole answer."""
    if "choices" not in chunk:          # llama-server's /completion: one result a chunk
        return dict(chunk, index=part.index)
    out: dict[str, Any] = dict(chunk, choices=_choices(chunk, part.index))
    if first_id is not None:
        out["id"] = first_id
    return out
