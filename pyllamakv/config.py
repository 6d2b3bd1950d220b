"""LlamaConfig: the load-time parameters of a Llama, checked before anything loads.

Also the two decisions made from them once the model's size is known: which
device runs it (``device`` and llama-cpp-python's ``n_gpu_layers``), and how
many bytes the device KV pool gets (``kv_pool_mib``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import UnsupportedError

DEVICES = ("auto", "cpu", "cuda")
GPU_KERNELS = ("exact", "fast")
MIB = 1 << 20


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclass(slots=True)
class LlamaConfig:
    n_ctx: int = 512                  # 0: the model's training context
    n_batch: int = 512                # tokens per decode call
    n_ubatch: int | None = None       # micro-batch of the forward pass; None: chosen (ubatch.py)
    n_threads: int | None = None      # None: the core's default (all cores)
    device: str = "auto"              # "auto" | "cpu" | "cuda"
    type_k: str | int = "f16"
    type_v: str | int = "f16"
    kv_pool_mib: float | str | None = None   # None: all resident | MiB | "auto"
    seed: int = -1                    # -1 (or 0xFFFFFFFF): random
    logits_all: bool = False
    n_gpu_layers: int | None = None   # llama-cpp-python's spelling of the device choice
    gpu_kernels: str = "fast"         # CUDA: "fast" (the fastest kernels) | "exact" (the CPU's bits)

    def __post_init__(self) -> None:
        for name in ("n_ctx", "n_batch", "n_ubatch"):
            v = getattr(self, name)
            if v is None and name == "n_ubatch":
                continue
            if not _is_int(v):
                raise TypeError(f"{name} must be an int, not {type(v).__name__}")
            if v < (0 if name == "n_ctx" else 1):
                raise ValueError(f"{name} must be {'>= 0' if name == 'n_ctx' else '>= 1'}, got {v}")
        if self.n_threads is not None and (not _is_int(self.n_threads) or self.n_threads < 0):
            raise ValueError(f"n_threads must be None or an int >= 0, got {self.n_threads!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if not _is_int(self.seed) or self.seed < -1 or self.seed > 0xFFFFFFFF:
            raise ValueError(f"seed must be -1 (random) or an int in [0, 2**32), got {self.seed!r}")
        if self.n_gpu_layers is not None and (not _is_int(self.n_gpu_layers)
                                              or self.n_gpu_layers < -1):
            raise ValueError(f"n_gpu_layers must be None, -1 (all) or an int >= 0, "
                             f"got {self.n_gpu_layers!r}")
        if self.gpu_kernels not in GPU_KERNELS:
            raise ValueError(f"gpu_kernels must be 'exact' (bit-identical with the CPU) or "
                             f"'fast', got {self.gpu_kernels!r}")
        p = self.kv_pool_mib
        if isinstance(p, str):
            if p != "auto":
                raise ValueError(f"kv_pool_mib must be None, a number of MiB or 'auto', got {p!r}")
        elif p is not None:
            if isinstance(p, bool) or not isinstance(p, (int, float)):
                raise TypeError(f"kv_pool_mib must be None, a number of MiB or 'auto', "
                                f"not {type(p).__name__}")
            if not math.isfinite(p) or p < 0:
                raise ValueError(f"kv_pool_mib must be a finite number >= 0, got {p!r}")

    @property
    def random_seed(self) -> bool:
        return self.seed in (-1, 0xFFFFFFFF)


def choose_device(cfg: LlamaConfig, n_layer: int, n_cuda: int) -> str:
    """'cpu' or 'cuda' from cfg.device and cfg.n_gpu_layers, given the GPUs present."""
    ngl = cfg.n_gpu_layers
    if ngl is not None and 0 < ngl < n_layer:
        raise UnsupportedError(f"n_gpu_layers={ngl}: splitting the model's {n_layer} layers "
                               "between GPU and CPU is not supported yet; use 0 (CPU) or -1 "
                               "(every layer on the GPU)")
    if cfg.device == "cuda" or (cfg.device == "auto" and ngl not in (None, 0)):
        if n_cuda == 0:
            if cfg.device == "cuda":
                raise UnsupportedError("device='cuda' but no CUDA device is usable (no GPU, or "
                                       "pyllamakv was built without CUDA); use device='cpu'")
            return "cpu"                 # n_gpu_layers=-1 without a GPU: llama.cpp runs on CPU
        if ngl == 0:
            raise ValueError("device='cuda' contradicts n_gpu_layers=0 (which means the CPU)")
        return "cuda"
    if cfg.device == "cpu" or ngl == 0:
        return "cpu"
    return "cuda" if n_cuda > 0 else "cpu"


def requested_pool_bytes(cfg: LlamaConfig) -> int | None:
    """Bytes for a numeric kv_pool_mib; None for None and for 'auto' (decided later)."""
    if cfg.kv_pool_mib is None or cfg.kv_pool_mib == "auto":
        return None
    return int(cfg.kv_pool_mib * MIB)
