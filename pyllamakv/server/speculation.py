"""Speculative decoding per request: which drafter a request's slot uses.

The request fields are llama-server's (its /completion documents them with
these dotted names):

- ``speculative.type``: ``"none"``; ``"ngram-simple"`` (alias ``"lookup"``),
  prompt lookup: n-grams of the context; ``"draft-simple"`` (alias
  ``"draft"``), the draft GGUF the server was started with (``--draft``);
  ``"mtp"``, the model's own MTP (nextn) block, where its GGUF has one (the
  slots' contexts are then made with the block: spec_mtp.py).
  Unset: the server's default (``--draft``; none without it).
- ``speculative.n_max``: the most tokens drafted per verification (0: none).
- ``speculative.n_min``: fewer drafted tokens than this are not verified.

The slot's sequence runs the drafter through the speculative path of its token
stream (api/decoding.py, spec/verify.py): greedy output is that of plain
decoding, sampled output keeps the target's distribution. Drafted and accepted
counts reach /metrics from the generation's Timings (accounting.py, metrics.py).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from ..spec.drafters import default_lookup

LOOKUP, DRAFT, MTP, NONE = "ngram-simple", "draft-simple", "mtp", "none"
ALIASES = {"lookup": LOOKUP, "draft": DRAFT, LOOKUP: LOOKUP, DRAFT: DRAFT, MTP: MTP, NONE: NONE}
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

    @property
    def uses_mtp(self) -> bool:   # the slot runs its MTP block only for such a request
        return bool(getattr(self.base, "uses_mtp", False))

    @property
    def length(self):             # an adaptive lookup's DraftLength (spec_decode.py)
        return getattr(self.base, "length", None)

    @property
    def last_match(self):
        return getattr(self.base, "last_match", None)

    def __call__(self, input_ids: np.ndarray, /, **kw: Any) -> np.ndarray:
        d = np.asarray(self.base(input_ids, **kw)).reshape(-1)
        if self.n_max is not None:
            d = d[:self.n_max]
        return d if d.size >= max(self.n_min, 1) else d[:0]


def _kind(spec: SpecRequest, default: str | None) -> str:
    return ALIASES[spec.type] if spec.type is not None else (default or NONE)


def check_available(spec: SpecRequest, engine) -> None:
    """ValueError naming speculative.type when engine (a slot's SlotEngine, as
    load_engines makes them) cannot draft as spec asks; before the request queues."""
    if not hasattr(engine, "draft_model"):
        if spec.type not in (None, NONE):
            raise ValueError("speculative.type: this server's engine has no speculative decoding")
        return
    kind = _kind(spec, getattr(engine, "spec_default", None))
    if kind == DRAFT and getattr(engine, "spec_draft_model", None) is None:
        raise ValueError("speculative.type 'draft-simple' needs a draft model: start the "
                         "server with --draft MODEL.gguf (or use 'ngram-simple')")
    if kind == MTP and getattr(engine, "spec_mtp", None) is None:
        raise ValueError(f"speculative.type 'mtp' needs a model with an MTP (nextn) block; "
                         f"{getattr(engine, 'model_path', 'this model')} has none "
                         f"(use 'ngram-simple')")


def request_drafter(spec: SpecRequest, default: str | None, drafters: dict,
                    lookups: dict | None = None) -> Any | None:
    """The drafter for one request on a slot whose server default is ``default``
    (a type, or None) and whose own drafters are ``drafters`` (DRAFT: the draft
    GGUF's, MTP: the MTP block's; None where the slot has none); prompt lookup
    as "lookup" sets it up (speculative.default_lookup), one per n_max kept in
    the slot's ``lookups``, so that its draft length learns across requests."""
    kind = _kind(spec, default)
    if kind == NONE or spec.n_max == 0:
        return None
    if kind == LOOKUP:
        lookups = {} if lookups is None else lookups
        if spec.n_max not in lookups:
            lookups[spec.n_max] = default_lookup(spec.n_max)
        base = lookups[spec.n_max]
    else:
        base = drafters.get(kind)
        if base is None:
            raise ValueError(f"speculative.type {kind!r}: this server has no such drafter")
        if spec.n_max is not None and hasattr(base, "num_pred_tokens"):
            base.num_pred_tokens = spec.n_max      # the slot's own drafter, this request only
    return Limited(base, spec.n_max, spec.n_min)


@contextlib.contextmanager
def drafting(llm, spec: SpecRequest) -> Iterator[None]:
    """Within: llm drafts as spec asks (llm a slot's SlotEngine with the server's
    ``spec_default``, ``spec_draft_model`` and ``spec_mtp`` set by load_engines)."""
    if not hasattr(llm, "draft_model"):   # an engine without speculation (tests' stand-ins)
        check_available(spec, llm)
        yield
        return
    drafters = {DRAFT: getattr(llm, "spec_draft_model", None),
                MTP: getattr(llm, "spec_mtp", None)}
    saved_k = {k: getattr(d, "num_pred_tokens", None) for k, d in drafters.items()}
    if not hasattr(llm, "spec_lookups"):
        llm.spec_lookups = {}
    saved = llm.draft_model
    llm.draft_model = request_drafter(spec, getattr(llm, "spec_default", None), drafters,
                                      llm.spec_lookups)
    try:
        yield
    finally:
        llm.draft_model = saved
        for k, d in drafters.items():
            if saved_k[k] is not None:
                d.num_pred_tokens = saved_k[k]
