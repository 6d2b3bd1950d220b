"""llama-cpp-python's callback lists: logits processors and stopping criteria.

A logits processor is ``f(input_ids, logits) -> logits``: it sees the ids so
far (prompt and generated, np.intc) and the next token's logits (float32,
n_vocab) and returns the logits to sample from. A stopping criterion is
``f(input_ids, logits) -> bool``, asked after each sampled token; True ends
the completion without that token (as llama-cpp-python does).
"""
from __future__ import annotations

from typing import Callable, List

import numpy as np

LogitsProcessor = Callable[[np.ndarray, np.ndarray], np.ndarray]
StoppingCriteria = Callable[[np.ndarray, np.ndarray], bool]


class LogitsProcessorList(List[LogitsProcessor]):
    """Processors applied in order, each to the previous one's output."""

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        for processor in self:
            scores = processor(input_ids, scores)
        return scores


class StoppingCriteriaList(List[StoppingCriteria]):
    """True when any criterion is (every one is asked)."""

    def __call__(self, input_ids: np.ndarray, logits: np.ndarray) -> bool:
        return any([bool(c(input_ids, logits)) for c in self])


class MinTokensLogitsProcessor:
    """Keeps token_eos from being sampled before min_tokens were generated."""

    def __init__(self, min_tokens: int, token_eos: int) -> None:
        self.min_tokens, self.token_eos = int(min_tokens), int(token_eos)
        self.prompt_tokens: int | None = None

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        if self.prompt_tokens is None:
            self.prompt_tokens = len(input_ids)
        if len(input_ids) - self.prompt_tokens < self.min_tokens:
            scores[self.token_eos] = -np.inf
        return scores


def stop_asked(criteria, hist) -> bool:
    """criteria (one callable or a list) asked with a Sequence's ids and last logits."""
    fns = criteria if isinstance(criteria, (list, tuple)) else [criteria]
    ids, logits = np.asarray(hist.input_ids(), np.intc), hist.last_logits()
    return any([bool(f(ids, logits)) for f in fns])
