"""The micro-batch (n_ubatch) chosen when the user leaves it unset.

A prompt runs through the forward pass n_ubatch tokens at a time. With a bounded
KV pool on a GPU, every micro-batch brings each layer's non-resident KV across
PCIe once, so the streaming cost of a prompt falls in proportion to the micro-batch:
there the choice is the largest of 4096 / 2048 / 1024 / 512 that n_batch allows
and whose activation buffers take at most a quarter of the GPU's free memory.
All resident on a GPU, the same rule: bigger micro-batches keep the prefill
GEMM's tiles fuller and give the attention more query tiles per launch (H200,
8B shape, q8_0 KV, 2026-12-03: 8K / 32K / 128K prompts in 0.329 / 1.747 /
14.035 s at 4096 against 0.345 / 1.810 / 14.110 s at 2048; see
docs/performance.md). On the CPU, 512. n_batch caps the choice (its default,
512, is llama-cpp-python's: pass n_batch=4096 or more for long prompts). The
choice is reported by ``Llama.kv_stats()["n_ubatch"]`` and, with
``verbose=True``, on stderr.
"""
from __future__ import annotations

from typing import Callable

CHOICES = (4096, 2048, 1024, 512)
RESIDENT = 512


def choose_ubatch(activations: Callable[[int], int], device: str, n_batch: int,
                  free_bytes: int | None) -> int:
    """The micro-batch for these settings (module docstring), at most n_batch;
    activations(u): device bytes of the buffers a micro-batch of u tokens takes."""
    if device != "cuda":
        return min(RESIDENT, n_batch)
    for u in CHOICES:
        if u <= n_batch and (free_bytes is None or activations(u) <= free_bytes // 4):
            return u
    return min(RESIDENT, n_batch)


def chosen_ubatch(tensors, hp: dict, device: str, cfg, n_ctx: int, pool: int | None) -> int:
    """Llama's hook: choose_ubatch with the GPU's free memory, and the buffers the
    core's memory plan gives for each micro-batch (its workspace, phase arena and
    decode set, and the backend's own buffers: core/native_plan.py). No KV plan
    of its own: the planner's minimum pool does not depend on the micro-batch
    (kv/plan.h), so the pool checked at load holds for every choice."""
    free = None
    if device == "cuda":
        from .plan import cuda_free_bytes
        free = cuda_free_bytes()

    def activations(u: int) -> int:
        from ..core.native_plan import memory_plan
        p = memory_plan(tensors, hp, device, n_ctx=n_ctx, n_batch=cfg.n_batch, n_ubatch=u,
                        type_k=cfg.type_k, type_v=cfg.type_v, kv_pool_bytes=pool,
                        logits_all=cfg.logits_all, gpu_kernels=cfg.gpu_kernels)
        return p.workspace + p.workspace_decode + p.backend
    return choose_ubatch(activations, device, cfg.n_batch, free)
