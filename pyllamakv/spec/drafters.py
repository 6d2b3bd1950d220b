"""Drafters for speculative decoding: who guesses the next tokens.

A drafter is any callable ``draft(input_ids: np.ndarray, **kw) -> np.ndarray``
returning the ids it proposes to follow ``input_ids`` (possibly none), the
interface of llama-cpp-python's ``LlamaDraftModel``, so its
``LlamaPromptLookupDecoding`` object works here unchanged. Drafts are
deterministic guesses (a point mass for the accept/reject rule in
spec_decode.py), so a bad drafter costs speed, never correctness.

- ``PromptLookupDecoding``: n-grams of the context (no model).
- ``DraftModel``: a second, smaller GGUF with the same vocabulary, drafting
  greedily on its own context.
- ``MTPDrafter`` (spec_mtp.py): a qwen35 model's own multi-token-prediction
  block, ``draft_model="mtp"``.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .length import DraftLength
from .mtp import MTPDrafter, wants_mtp

if TYPE_CHECKING:
    from ..engine.sequence import Sequence

Drafter = Callable[..., np.ndarray]


class VocabMismatchError(ValueError):
    """The draft model's vocabulary is not the target's."""


# ---------------------------------------------------------------- prompt lookup

class PromptLookupDecoding:
    """Drafts the tokens that followed the earliest earlier occurrence of the
    context's last n-gram, trying n = max_ngram_size down to min_ngram_size
    (1, as llama-cpp-python's LlamaPromptLookupDecoding: any matching token
    drafts; more: no draft unless that many tokens match)."""

    def __init__(self, max_ngram_size: int = 2, num_pred_tokens: int = 10,
                 min_ngram_size: int = 1, *, adaptive: bool = False):
        for name, v in (("max_ngram_size", max_ngram_size), ("num_pred_tokens", num_pred_tokens),
                        ("min_ngram_size", min_ngram_size)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        if min_ngram_size > max_ngram_size:
            raise ValueError(f"min_ngram_size ({min_ngram_size}) must not exceed max_ngram_size "
                             f"({max_ngram_size})")
        self.max_ngram_size = int(max_ngram_size)
        self.num_pred_tokens = int(num_pred_tokens)
        self.min_ngram_size = int(min_ngram_size)
        # adaptive: speculative_tokens verifies only as many of the drafts as
        # pay on this device (spec_length.py); last_match: the n-gram length
        # the last draft came from (0: none)
        self.length = DraftLength(self.num_pred_tokens) if adaptive else None
        self.last_match = 0

    def __call__(self, input_ids: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        ids = np.asarray(input_ids).reshape(-1)
        for n in range(min(self.max_ngram_size, ids.size - 1), self.min_ngram_size - 1, -1):
            tail = ids[-n:]
            windows = np.lib.stride_tricks.sliding_window_view(ids[:-1], n)   # (len-n, n)
            hits = np.nonzero(np.all(windows == tail, axis=1))[0]
            for start in hits + n:                                           # earliest first
                if start < ids.size:
                    self.last_match = n
                    return ids[start:start + self.num_pred_tokens].astype(np.intc)
        self.last_match = 0
        return np.zeros(0, np.intc)


# Prompt lookup as "lookup" (Llama, CLI, the server's ngram-simple) sets it up:
# (max_ngram_size, num_pred_tokens, min_ngram_size) = (5, 10, 1), adaptive:
# drafts from any match of up to 5 tokens, of which spec_length.DraftLength
# verifies as many as pay on this device (learned from the passes' measured
# cost and the acceptance per match length). Chosen with
# benchmarks/bench_spec_accept.py on its chat tasks against the fixed 5:6:3
# that was the default (docs/performance.md, "Adaptive draft length",
# 2026-12-03): measured on the CPU 175.0 / 136.6 t/s for code edits /
# summaries against 166.6 / 123.5; priced at the H200's verification costs
# (8B shape, q8_0 KV), streamed through a 1 GiB pool at 32K 3.94x / 2.09x
# against 3.27x / 1.79x, at 128K 4.56x / 2.21x against 3.33x / 1.81x, and
# all resident at 32K 1.65x / 1.31x against 1.70x / 1.22x.
LOOKUP = (5, 10, 1)


def default_lookup(num_pred_tokens: int | None = None) -> PromptLookupDecoding:
    """The prompt lookup "lookup" means (on every device): adaptive, at most
    num_pred_tokens drafts per pass when given."""
    max_n, k, min_n = LOOKUP
    return PromptLookupDecoding(max_n, num_pred_tokens or k, min_n, adaptive=True)


# ---------------------------------------------------------------- draft model

def _vocab_key(metadata: dict) -> tuple:
    return (metadata.get("tokenizer.ggml.model"), metadata.get("tokenizer.ggml.tokens"))


class DraftModel:
    """A small GGUF drafting greedily: ``num_pred_tokens`` arg-max tokens on its
    own KV cache, which keeps the longest prefix it shares with each call's
    input_ids (accepted drafts are not decoded twice)."""

    def __init__(self, model_path: str | os.PathLike, num_pred_tokens: int = 4, *,
                 n_ctx: int = 4096, n_threads: int | None = None, device: str = "cpu"):
        from ..core import native as _native
        if isinstance(num_pred_tokens, bool) or not isinstance(num_pred_tokens, int) \
                or num_pred_tokens < 1:
            raise ValueError(f"num_pred_tokens must be an int >= 1, got {num_pred_tokens!r}")
        self.model_path = str(model_path)
        self.num_pred_tokens = num_pred_tokens
        file = _native.GGUFFile(self.model_path)
        self.metadata = file.metadata
        self._model = _native.Model(file, device, n_threads, own_file=True)
        self._n_batch = 512
        self._ctx = _native.Context(self._model, n_ctx=n_ctx, n_batch=self._n_batch,
                                    n_ubatch=self._n_batch, n_threads=n_threads)
        self._ids = np.zeros(0, np.int32)        # what the draft cache holds

    @property
    def n_vocab(self) -> int:
        return self._model.n_vocab

    def check_vocab(self, target_metadata: dict, target_n_vocab: int) -> None:
        """Raises VocabMismatchError unless the two models share one vocabulary."""
        mine, theirs = _vocab_key(self.metadata), _vocab_key(target_metadata)
        if self.n_vocab != target_n_vocab or mine != theirs:
            n_mine = len(mine[1] or ())
            n_theirs = len(theirs[1] or ())
            raise VocabMismatchError(
                f"draft model {self.model_path} has another vocabulary than the target "
                f"({mine[0]!r}, {n_mine} tokens, n_vocab {self.n_vocab} vs {theirs[0]!r}, "
                f"{n_theirs} tokens, n_vocab {target_n_vocab}); a draft model must share it")

    def __call__(self, input_ids: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        ids = np.asarray(input_ids, np.int32).reshape(-1)
        room = self._ctx.n_ctx - ids.size
        k = min(self.num_pred_tokens, room)
        if ids.size == 0 or k <= 0:
            return np.zeros(0, np.intc)
        n = min(self._ids.size, ids.size - 1)   # re-decode at least the last token
        diff = np.nonzero(self._ids[:n] != ids[:n])[0]
        keep = int(diff[0]) if diff.size else n
        self._ctx.truncate(keep)
        for i in range(keep, ids.size, self._n_batch):
            self._ctx.decode(ids[i:i + self._n_batch])
        out = []
        for _ in range(k):
            t = int(np.argmax(self._ctx.logits()[-1]))
            out.append(t)
            if len(out) < k:
                self._ctx.decode([t])
        self._ids = np.concatenate([ids, np.asarray(out[:-1], np.int32)])
        return np.asarray(out, np.intc)

    def close(self) -> None:
        self._ctx = self._model = None


# ---------------------------------------------------------------- choosing one

def make_drafter(spec: Any, seq: "Sequence") -> Drafter | None:
    """The drafter for ``Llama(draft_model=spec)`` generating on seq: None, "lookup",
    "mtp", a GGUF path, or any drafter callable (checked against the target's
    vocabulary when it can tell, as DraftModel does)."""
    if spec is None:
        return None
    if isinstance(spec, str) and spec == "lookup":
        return default_lookup()
    if wants_mtp(spec):   # the target's own MTP block (spec_mtp.py)
        return MTPDrafter(seq.ctx, seq=seq.id)
    model = seq.ctx.model
    if isinstance(spec, (str, os.PathLike)):
        spec = DraftModel(spec, n_ctx=seq.n_ctx, device=model.device)
    if not callable(spec):
        raise TypeError(f"draft_model must be 'lookup', 'mtp', a GGUF path or a callable "
                        f"draft(input_ids) -> ids, not {type(spec).__name__}")
    check = getattr(spec, "check_vocab", None)
    if check is not None:
        check(model.file.metadata, seq.ctx.n_vocab)   # typed: the token list
    return spec
