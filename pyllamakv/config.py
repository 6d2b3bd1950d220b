"""LlamaConfig: the load-time parameters of a Llama, checked before anything loads.

Also the two decisions made from them once the model's size is known: which
device runs it (``device`` and llama-cpp-python's ``n_gpu_layers``), and how
many bytes the device KV pool gets (``kv_pool_mib``).
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

from .checks import (GPU_KERNELS, check_bool, check_choice, check_gpu_kernels, check_int,
                     check_real, is_int)
from .errors import ParameterError, ParameterTypeError, UnsupportedError

DEVICES = ("auto", "cpu", "cuda")
MIB = 1 << 20
MAX_POOL_MIB = float(1 << 43)      # 8 EiB: beyond any memory, below int64 bytes


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


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
    gpu_memory_mib: float | None = None   # device memory for everything (budget.py); None: no bound
    n_seq_max: int = 1                # sequences in the context (a prompt list runs them at once)
    n_cpu_moe: int | None = None      # llama.cpp's: layers whose experts stay in host memory

    def __post_init__(self) -> None:
        check_int("n_ctx", self.n_ctx, 0)
        check_int("n_batch", self.n_batch, 1)
        if self.n_ubatch is not None:     # None: chosen at load (ubatch.py)
            check_int("n_ubatch", self.n_ubatch, 1)
        if self.n_threads is not None:
            n = check_int("n_threads", self.n_threads, 0)
            cpus = usable_cpus()
            if n > cpus:          # more threads than cores only makes them wait on each other
                warnings.warn(f"n_threads={n} exceeds the {cpus} usable CPUs; using {cpus}",
                              RuntimeWarning, stacklevel=4)
                self.n_threads = cpus
        check_int("n_seq_max", self.n_seq_max, 1, 1 << 16)
        check_choice("device", self.device, DEVICES)
        if self.seed != 0xFFFFFFFF:
            check_int("seed", self.seed, -1, 0xFFFFFFFF)
        self.logits_all = check_bool("logits_all", self.logits_all)
        if self.n_gpu_layers is not None:
            check_int("n_gpu_layers", self.n_gpu_layers, -1)
        check_gpu_kernels(self.gpu_kernels)
        check_kv_pool_mib(self.kv_pool_mib)
        check_gpu_memory_mib(self.gpu_memory_mib)
        check_n_cpu_moe(self.n_cpu_moe)
        from .core.native import type_id   # the core's table of KV types (loads the library)
        for name in ("type_k", "type_v"):
            try:
                type_id(getattr(self, name), kv=True)
            except TypeError as e:
                raise ParameterTypeError(f"{name}: {e}") from None
            except ValueError as e:
                raise ParameterError(f"{name}: {e}") from None

    @property
    def random_seed(self) -> bool:
        return self.seed in (-1, 0xFFFFFFFF)

    def cpu_moe_layers(self, hp: dict, device: str) -> int:
        """The layers whose experts are in host memory and run on the CPU: 0 for a model
        without experts (n_cpu_moe has nothing to place), every layer on the CPU backend
        (all its weights are host memory; the first n_cpu_moe take the core's host-expert
        path, with the same bits), else n_cpu_moe's first layers (None: none)."""
        if not hp.get("n_expert"):
            return 0
        if device == "cpu":
            return hp["n_layer"]
        return min(self.n_cpu_moe or 0, hp["n_layer"])


# The checks of single parameters that other entry points take before a Llama
# exists (the command line's flags, _native.Context): the one place for each.

def check_kv_pool_mib(p: Any) -> float | str | None:
    """kv_pool_mib: None (all resident), a number of MiB >= 0, or 'auto'."""
    if isinstance(p, str):
        if p != "auto":
            raise ParameterError(f"kv_pool_mib must be None, a number of MiB or 'auto', "
                                 f"got {p!r}")
    elif p is not None:
        if isinstance(p, bool) or not isinstance(p, (int, float)):
            raise ParameterTypeError(f"kv_pool_mib must be None, a number of MiB or 'auto', "
                                     f"not {type(p).__name__}")
        check_real("kv_pool_mib", p, 0.0, MAX_POOL_MIB)
    return p


def check_gpu_memory_mib(g: Any) -> float | None:
    """gpu_memory_mib: None (no budget) or a number of MiB > 0; the KV then takes
    what the budget leaves (kv_pool_mib None means 'auto' there)."""
    if g is not None:
        check_real("gpu_memory_mib", g, 0.0, MAX_POOL_MIB, lo_open=True)
    return g


def check_n_cpu_moe(n: Any) -> int | None:
    """n_cpu_moe (llama.cpp's --n-cpu-moe): None, or the number of layers (>= 0; more
    than the model has: all) whose experts stay in host memory, computed on the CPU."""
    if n is not None:
        check_int("n_cpu_moe", n, 0)
    return n


@dataclass(slots=True)
class CompletionConfig:
    """The arguments of one completion call that are not sampling parameters."""
    max_tokens: int | None = 16       # None or <= 0: up to the context's end
    stop: str | Sequence[str] | None = None
    echo: bool = False
    logprobs: int | None = None       # top alternatives per token; None: no logprobs
    stream: bool = False
    suffix: None = None

    def __post_init__(self) -> None:
        if self.max_tokens is not None:
            check_int("max_tokens", self.max_tokens, -2**31)
        s = self.stop
        if isinstance(s, str):
            self.stop = [s]
        elif s is None:
            self.stop = []
        elif isinstance(s, (list, tuple)):
            for i, x in enumerate(s):
                if not isinstance(x, str):
                    raise ParameterTypeError(f"stop[{i}] must be a str, not "
                                             f"{type(x).__name__} ({x!r})")
            self.stop = list(s)
        else:
            raise ParameterTypeError(f"stop must be a str, a list of str or None, not "
                                     f"{type(s).__name__} ({s!r})")
        self.echo = check_bool("echo", self.echo)
        self.stream = check_bool("stream", self.stream)
        if self.logprobs is not None:
            check_int("logprobs", self.logprobs, 0, 1 << 20)
        if self.suffix is not None:
            raise UnsupportedError("suffix is not supported")


def tokens_arg(name: str, tokens: Any, n_vocab: int) -> list[int]:
    """A token-id argument as a list of ints in [0, n_vocab)."""
    if isinstance(tokens, (str, bytes, bytearray)) or not hasattr(tokens, "__iter__"):
        raise ParameterTypeError(f"{name} must be a sequence of token ids, not "
                                 f"{type(tokens).__name__}")
    out = []
    for i, t in enumerate(tokens):
        if not is_int(t):
            raise ParameterTypeError(f"{name}[{i}] must be an int token id, not "
                                     f"{type(t).__name__} ({t!r})")
        if not 0 <= t < n_vocab:
            raise ParameterError(f"{name}[{i}]: token id {t} out of range [0, {n_vocab})")
        out.append(int(t))
    return out


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


def requested_pool_bytes(cfg: LlamaConfig, full_bytes: int | None = None) -> int | None:
    """Bytes for a numeric kv_pool_mib; None for None and for 'auto' (decided later).
    A pool above full_bytes (the whole cache) is clamped to it, with a warning."""
    if cfg.kv_pool_mib is None or cfg.kv_pool_mib == "auto":
        return None
    pool = int(cfg.kv_pool_mib * MIB)
    if full_bytes is not None and pool > full_bytes:
        warnings.warn(f"kv_pool_mib={cfg.kv_pool_mib} exceeds the whole KV cache "
                      f"({full_bytes / MIB:.3f} MiB); using {full_bytes / MIB:.3f} MiB",
                      RuntimeWarning, stacklevel=3)
        pool = full_bytes
    return pool
