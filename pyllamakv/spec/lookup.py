"""llama-cpp-python's drafter classes over pyllamakv's (drafters.py).

``LlamaDraftModel`` is the interface: ``draft(input_ids, **kwargs) -> ids``.
``LlamaPromptLookupDecoding`` drafts by prompt lookup with llama-cpp-python's
defaults (n-grams of up to 2 tokens, 10 drafted tokens; any match drafts).
"""
from __future__ import annotations

import abc
from typing import Any

import numpy as np

from .drafters import PromptLookupDecoding


class LlamaDraftModel(abc.ABC):
    @abc.abstractmethod
    def __call__(self, input_ids: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        ...


class LlamaPromptLookupDecoding(PromptLookupDecoding, LlamaDraftModel):
    def __init__(self, max_ngram_size: int = 2, num_pred_tokens: int = 10) -> None:
        PromptLookupDecoding.__init__(self, max_ngram_size, num_pred_tokens)

    @staticmethod
    def find_candidate_pred_tokens(input_ids: np.ndarray, max_ngram_size: int,
                                   num_pred_tokens: int) -> np.ndarray:
        """The tokens after the earliest earlier match of input_ids' last n-gram."""
        return PromptLookupDecoding(max_ngram_size, num_pred_tokens)(input_ids)
