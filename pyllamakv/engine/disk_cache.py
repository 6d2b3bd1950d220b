"""LlamaDiskCache: prompt states kept on disk, through the ``diskcache`` package.

The same interface as LlamaRAMCache (cache.py); states survive the process and
are shared by processes that open the same directory. ``diskcache`` is an
optional dependency (``pip install 'pyllamakv[cache]'``); its own eviction
(least recently stored first) keeps the directory under capacity_bytes.
"""
from __future__ import annotations

from typing import Sequence

from .cache import BaseLlamaCache, longest_prefix
from .state import LlamaState


class LlamaDiskCache(BaseLlamaCache):
    """States in cache_dir, at most capacity_bytes of them."""

    def __init__(self, cache_dir: str = ".cache/llama_cache",
                 capacity_bytes: int = 2 << 30) -> None:
        super().__init__(capacity_bytes)
        try:
            import diskcache
        except ImportError as e:
            raise ImportError("LlamaDiskCache needs diskcache: "
                              "pip install 'pyllamakv[cache]'") from e
        self.cache = diskcache.Cache(str(cache_dir), size_limit=capacity_bytes)

    @property
    def cache_size(self) -> int:
        return int(self.cache.volume())

    def lookup(self, tokens: Sequence[int]) -> tuple[LlamaState | None, int]:
        k, n = longest_prefix(self.cache.iterkeys(), tuple(int(t) for t in tokens))
        if k is None:
            return None, 0
        state = self.cache.get(k)
        return (state, n) if state is not None else (None, 0)

    def __setitem__(self, tokens: Sequence[int], state: LlamaState) -> None:
        key = tuple(int(t) for t in tokens)
        self.cache[key] = state
        while self.cache.volume() > self.capacity_bytes and len(self.cache) > 1:
            self.cache.cull()
            if self.cache.volume() > self.capacity_bytes:
                oldest = next(self.cache.iterkeys())
                if oldest == key:
                    break
                del self.cache[oldest]
