"""Speculative decoding per request: which drafter a request's slot uses.

The request fields are llama-server's (its /completion documents them with
these dotted names):

- ``speculative.type``: ``"none"``; ``"ngram-simple"`` (alias ``"lookup"``),
  prompt lookup: n-grams of the context; ``"draft-simple"`` (alias
  ``"draft"``), the draft GGUF the server was started with (``--draft``).
  Unset: the server's default (``--draft``; none without it).
- ``speculative.n_max``: the most tokens drafted per verification (0: none).
- ``speculative.n_min``: fewer drafted tokens than this are not verified.

The slot's Llama runs the drafter through its own speculative path
(spec_decode.py): greedy output is that of plain decoding, sampled output keeps
the target's distribution. Drafted and accepted counts reach /metrics from
the slot's ``timings`` after each request (slots.py, metrics.py).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from ..speculative import PromptLookupDecoding

LOOKUP, DRAFT, NONE = "ngram-simple", "draft-simple", "none"
ALIASES = {"lookup": LOOKUP, "draft": DRAFT, LOOKUP: LOOKUP, DRAFT: DRAFT, NONE: NONE}
MAX_DRAFT = 64       # a verification is one pass of n_max + 1 tokens (at most n_batch)


@dataclass(slots=True, frozen=True)
class SpecRequest:
    """A request's speculative fields; None: the server's default."""
    type: str | None = None
    n_max: int | None = None
    n_min: int = 0

    def __post_init__(self) -> None:
        if self.type is not None and self.type not in ALIASES:
            raise ValueError(f"speculative.type must be one of {', '.join(sorted(ALIASES))}, "
                             f"got {self.type!r}")
        for name, v in (("n_max", self.n_max), ("n_min", self.n_min)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)
                                  or not 0 <= v <= MAX_DRAFT):
                raise ValueError(f"speculative.{name} must be an int in [0, {MAX_DRAFT}], "
                                 f"got {v!r}")


class Limited:
    """A drafter whose drafts are cut to n_max and dropped when shorter than n_min."""

    def __init__(self, base, n_max: int | None, n_min: int):
        self.base, self.n_max, self.n_min = base, n_max, n_min

    def __call__(self, input_ids: np.ndarray, /, **kw: Any) -> np.ndarray:
        d = np.asarray(self.base(input_ids, **kw)).reshape(-1)
        if self.n_max is not None:
            d = d[:self.n_max]
        return d if d.size >= max(self.n_min, 1) else d[:0]


def request_drafter(spec: SpecRequest, default: str | None, draft_model) -> Any | None:
    """The drafter for one request on a slot whose server default is ``default``
    (a type, or None) and whose draft GGUF drafter is ``draft_model`` (or None)."""
    kind = ALIASES[spec.type] if spec.type is not None else (default or NONE)
    if kind == NONE or spec.n_max == 0:
        return None
    if kind == LOOKUP:
        base = PromptLookupDecoding(num_pred_tokens=spec.n_max or 10)
    else:
        if draft_model is None:
            raise ValueError("speculative.type 'draft-simple' needs a draft model: start the "
                             "server with --draft MODEL.gguf (or use 'ngram-simple')")
        base = draft_model
        if spec.n_max is not None and hasattr(base, "num_pred_tokens"):
            base.num_pred_tokens = spec.n_max      # the slot's own drafter, this request only
    return Limited(base, spec.n_max, spec.n_min)


@contextlib.contextmanager
def drafting(llm, spec: SpecRequest) -> Iterator[None]:
    """Within: llm drafts as spec asks (llm a slot's Llama with the server's
    ``spec_default`` and ``spec_draft_model`` set by load_engines)."""
    if not hasattr(llm, "draft_model"):   # an engine without speculation (tests' stand-ins)
        if spec.type not in (None, NONE):
            raise ValueError("this server's engine has no speculative decoding")
        yield
        return
    model = getattr(llm, "spec_draft_model", None)
    saved_k = getattr(model, "num_pred_tokens", None)
    saved = llm.draft_model
    llm.draft_model = request_drafter(spec, getattr(llm, "spec_default", None), model)
    try:
        yield
    finally:
        llm.draft_model = saved
        if saved_k is not None:
            model.num_pred_tokens = saved_k
