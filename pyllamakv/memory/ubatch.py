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

CHOICES = (4096, 2048, 1024, 512)
RESIDENT = 512


def activation_bytes_per_token(hp: dict) -> int:
    """Bytes of the forward pass's buffers per token of a micro-batch (context.c's list)."""
    nq = hp["n_head"] * hp["head_dim"]
    nkv = hp["n_head_kv"] * hp["head_dim"]
    wide = max(nq, hp["n_embd"])
    floats = 2 * hp["n_embd"] + wide + nq + 2 * nkv + 2 * hp["n_ff"]
    # the CUDA backend's 8-bit activation codes (two sets), scales and attention state
    widest = max(hp["n_embd"], hp["n_ff"], nq)
    codes = 2 * (widest * 9 // 8)
    x16 = 2 * widest   # gemm_wg.cu's f16 copy of a matmul's input (sm_90a)
    return 4 * floats + codes + x16 + 4 * (nq + 2 * hp["n_head"])


def choose_ubatch(hp: dict, device: str, n_batch: int, pool_bytes: int | None,
                  free_bytes: int | None) -> int:
    """The micro-batch for these settings (module docstring), at most n_batch."""
    if device != "cuda":
        return min(RESIDENT, n_batch)
    per_token = activation_bytes_per_token(hp)
    for u in CHOICES:
        if u <= n_batch and (free_bytes is None or u * per_token <= free_bytes // 4):
            return u
    return min(RESIDENT, n_batch)


def chosen_ubatch(hp: dict, device: str, n_batch: int, pool: int | None) -> int:
    """Llama's hook: choose_ubatch with the GPU's free memory. No plan of its own:
    the planner's minimum pool does not depend on the micro-batch (kv/plan.h), so
    the pool checked at load holds for every choice."""
    free = None
    if device == "cuda":
        from .plan import cuda_free_bytes
        free = cuda_free_bytes()
    return choose_ubatch(hp, device, n_batch, pool, free)
