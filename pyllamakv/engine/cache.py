"""Prompt caches: states kept by token prefix, as llama-cpp-python's ``set_cache``.

``llm.set_cache(LlamaRAMCache(capacity_bytes=2 << 30))`` makes each completion
start from the cached state whose tokens share the longest prefix with the new
prompt (when that prefix is longer than what the context already holds), and
store the state it ends in. The least recently used states leave first when
the cache is over its capacity.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict
from typing import Iterable, Sequence

from .state import LlamaState


def _check_capacity(capacity_bytes) -> int:
    if isinstance(capacity_bytes, bool) or not isinstance(capacity_bytes, int) \
            or capacity_bytes <= 0:
        raise ValueError(f"capacity_bytes must be an int > 0, got {capacity_bytes!r}")
    return capacity_bytes


def longest_prefix(keys: Iterable[tuple[int, ...]], key: tuple[int, ...]
                   ) -> tuple[tuple[int, ...] | None, int]:
    """(the key sharing the longest prefix with key, that prefix's length)."""
    best, n_best = None, 0
    for k in keys:
        n = 0
        for a, b in zip(k, key):
            if a != b:
                break
            n += 1
        if n > n_best:
            best, n_best = k, n
    return best, n_best


class BaseLlamaCache(ABC):
    """A store of LlamaStates by token prefix (llama-cpp-python's interface):
    ``cache[tokens]`` is the state sharing the longest prefix with tokens."""

    def __init__(self, capacity_bytes: int = 2 << 30) -> None:
        self.capacity_bytes = _check_capacity(capacity_bytes)

    @property
    @abstractmethod
    def cache_size(self) -> int: ...

    @abstractmethod
    def lookup(self, tokens: Sequence[int]) -> tuple[LlamaState | None, int]: ...

    @abstractmethod
    def __setitem__(self, tokens: Sequence[int], state: LlamaState) -> None: ...

    def __getitem__(self, tokens: Sequence[int]) -> LlamaState:
        state, n = self.lookup(tokens)
        if state is None:
            raise KeyError("no cached state shares a prefix with these tokens")
        return state

    def __contains__(self, tokens: Sequence[int]) -> bool:
        return self.lookup(tokens)[0] is not None


class LlamaRAMCache(BaseLlamaCache):
    """States in memory, at most capacity_bytes of them."""

    def __init__(self, capacity_bytes: int = 2 << 30) -> None:
        super().__init__(capacity_bytes)
        self._states: OrderedDict[tuple[int, ...], LlamaState] = OrderedDict()

    @property
    def cache_size(self) -> int:
        return sum(s.llama_state_size for s in self._states.values())

    def lookup(self, tokens: Sequence[int]) -> tuple[LlamaState | None, int]:
        """(the state sharing the longest prefix with tokens, that prefix's length)."""
        k, n = longest_prefix(self._states, tuple(int(t) for t in tokens))
        if k is None:
            return None, 0
        self._states.move_to_end(k)
        return self._states[k], n

    def __setitem__(self, tokens: Sequence[int], state: LlamaState) -> None:
        key = tuple(int(t) for t in tokens)
        self._states.pop(key, None)
        self._states[key] = state
        while len(self._states) > 1 and self.cache_size > self.capacity_bytes:
            self._states.popitem(last=False)


LlamaCache = LlamaRAMCache     # llama-cpp-python's older name
