"""ServerSettings: what `pyllamakv serve` was asked for, checked before anything loads.

The model's own parameters (context, threads, device, KV types, pool, memory
budget) are checked by LlamaConfig (config.py), the one place that checks
them, here before anything loads; this class checks what only the server has
(slots, queue, time limit, address) and the meaning of the shared ones across
slots: ``n_ctx`` is each slot's context window, ``kv_pool_mib`` the device
KV pool of the whole server: given once to the one engine whose sequences the
slots are, and divided evenly between the slots only where each keeps a
context of its own (engines.py says when: hybrids on CUDA, MTP models).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

from ..config import LlamaConfig


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclass(slots=True)
class ServerSettings:
    model: str | None = None          # GGUF path; None: the default model
    host: str = "127.0.0.1"
    port: int = 8080
    parallel: int = 1                 # slots: requests generated at the same time
    n_ctx: int = 2048                 # per slot
    kv_pool_mib: float | str | None = None   # whole server; None: all resident
    gpu_memory_mib: float | None = None      # passed to Llama where it takes it
    api_key: str | None = None        # None: no authentication
    queue_size: int = 64              # requests waiting for a slot before 503
    timeout_s: float = 600.0          # per request, queueing included
    n_threads: int | None = None      # per slot; None: the cores divided by the slots
    device: str = "auto"
    type_k: str = "f16"
    type_v: str = "f16"
    model_alias: str | None = None    # the name /v1/models reports; None: the file name
    draft_model: str | None = None    # speculation by default: "lookup", "mtp" or a draft GGUF
    # llama-server's options (command.py)
    n_gpu_layers: int | None = None   # -ngl: all (-1, or >= the layers) or none (0)
    n_cpu_moe: int | None = None      # --n-cpu-moe: layers whose experts stay in host memory
    api_keys: tuple[str, ...] = ()    # more accepted keys (--api-key-file)
    embedding: bool = False           # --embedding: an embedding server (no generation)
    pooling: str | None = None        # --pooling; None: the model's, mean where it has none
    chat_template: str | None = None  # --chat-template(-file): a named format or jinja source
    temperature: float | None = None  # --temp: the default of requests that give none
    seed: int | None = None           # --seed: the default of requests that give none
    n_predict: int | None = None      # -n: the default max_tokens (-1: to the context's end)
    cors_origins: tuple[str, ...] = ()   # --cors-origins; empty: no CORS headers at all
    metrics: bool = True              # /metrics served (llama-server: only with --metrics)
    slots_endpoint: bool = False      # --slots: GET /slots
    log_level: str = "info"           # --log-level: the request log (debug, info, warning, error)
    tags: tuple[str, ...] = ()        # --tags: reported by /v1/models
    ui: bool = True                   # --no-ui: no chat page at /
    # guards against hostile clients (guards.py)
    host_allow: tuple[str, ...] = ()  # Host names beside loopback ones on a loopback bind; "*": any
    max_body_bytes: int = 8 << 20     # request bodies over this: 413
    max_connections: int = 512        # open connections (lowered below the fd limit)
    header_timeout_s: float = 10.0    # a connection with no request in progress for this long closes

    def __post_init__(self) -> None:
        LlamaConfig(self.n_ctx, n_threads=self.n_threads, device=self.device,
                    type_k=self.type_k, type_v=self.type_v, kv_pool_mib=self.kv_pool_mib,
                    gpu_memory_mib=self.gpu_memory_mib, n_cpu_moe=self.n_cpu_moe)
        self.host_allow = tuple(self.host_allow or ())
        if not all(isinstance(h, str) and h for h in self.host_allow):
            raise ValueError(f"host_allow must be non-empty host names, got {self.host_allow!r}")
        if not isinstance(self.header_timeout_s, (int, float)) or isinstance(
                self.header_timeout_s, bool) or not 0 < self.header_timeout_s < math.inf:
            raise ValueError(f"header_timeout_s must be seconds > 0, got {self.header_timeout_s!r}")
        for name, lo in (("port", 0), ("parallel", 1), ("queue_size", 0),
                         ("max_body_bytes", 1), ("max_connections", 1)):
            v = getattr(self, name)
            if not _is_int(v) or v < lo:
                raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
        if self.port > 65535:
            raise ValueError(f"port must be <= 65535, got {self.port}")
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)) \
                or not math.isfinite(self.timeout_s) or self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be a finite number of seconds > 0, "
                             f"got {self.timeout_s!r}")
        if self.api_key is not None and not (isinstance(self.api_key, str) and self.api_key):
            raise ValueError("api_key must be a non-empty string or None")
        if self.log_level not in ("debug", "info", "warning", "error"):
            raise ValueError(f"log_level must be debug, info, warning or error, "
                             f"got {self.log_level!r}")
        if self.temperature is not None and not 0.0 <= self.temperature <= 2.0:
            raise ValueError(f"temperature must be in [0, 2], got {self.temperature}")
        if self.n_predict is not None and (not _is_int(self.n_predict) or self.n_predict < -1
                                           or self.n_predict == 0):
            raise ValueError(f"n_predict must be -1 or an int >= 1, got {self.n_predict!r}")
        if any(not (isinstance(k, str) and k) for k in self.api_keys):
            raise ValueError("api_keys must be non-empty strings")
        if self.kv_pool_mib == "auto" and self.parallel > 1:
            raise ValueError("kv_pool_mib='auto' sizes one context's pool from the free device "
                             "memory; with parallel > 1 give the server's pool in MiB")
        d = self.draft_model
        if d is not None and not (isinstance(d, str) and d):
            raise ValueError(f"draft_model must be None, 'lookup', 'mtp' or a GGUF path, "
                             f"got {d!r}")

    @property
    def keys(self) -> tuple[str, ...]:
        """Every accepted API key (none: no authentication)."""
        return ((self.api_key,) if self.api_key else ()) + tuple(self.api_keys)

    @property
    def threads_per_slot(self) -> int:
        return self.n_threads or max(1, (os.cpu_count() or 1) // self.parallel)

    @property
    def engine_threads(self) -> int:
        """The threads of one context shared by every slot: each slot's, up to the cores."""
        return min(os.cpu_count() or 1, self.threads_per_slot * self.parallel)

    @property
    def slot_pool_mib(self) -> float | str | None:
        """Each slot's share of the KV pool, where each slot has a context of its own."""
        p = self.kv_pool_mib
        return p if p is None or p == "auto" else p / self.parallel
