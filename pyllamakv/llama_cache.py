"""llama_cpp.llama_cache: prompt-state caches (engine/cache.py, engine/disk_cache.py)."""
from .engine.cache import BaseLlamaCache, LlamaCache, LlamaRAMCache
from .engine.disk_cache import LlamaDiskCache

__all__ = ["BaseLlamaCache", "LlamaCache", "LlamaRAMCache", "LlamaDiskCache"]
