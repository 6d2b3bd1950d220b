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


# ---------------------------------------------------------------- inside a budget, with the phase arena

# With a bounded pool on CUDA the prefill workspace is the phase arena (arena.h),
# which decode lends to the KV: a wider micro-batch takes memory from the pool
# only while a prompt is read (the host store holds every KV row, so the pool's
# resident chunks are not needed then), and decode gets it back. The budget's
# n_ubatch is then the one with the least modelled prefill time for a prompt
# filling the context: compute per token, which falls as micro-batches widen,
# plus the KV that each micro-batch streams across PCIe from beyond the
# resident prefix the narrower pool keeps. The constants are measured figures:
PCIE_BYTES_PER_S = 50e9   # host -> device copies of 32-64 MiB: 54-55 GB/s on the H100 / H200
                          # hosts (docs/performance-history.md), taken a little under
PREFILL_FLOPS = 200e12    # matmul rate of a prefill at n_ubatch 4096: Qwen3.5-27B-shaped
                          # IQ4_XS, 32K prompt in 8.26 s all resident (H100, 2026-12-07, issue 42)
# per-token compute of a micro-batch against 4096's: 2048 from the 8B shape on an
# H200 (32K prompt 1.810 s vs 1.747 s, 2026-12-03), 512 from the 27B shape on an
# H100 (32K prompt 12.75 s inside 16 GiB vs 8.26 s at 4096: an upper bound, as
# that run may also have streamed), 1024 between them (geometric mean: not measured)
REL_COMPUTE = {4096: 1.0, 2048: 1.036, 1024: 1.263, 512: 1.54}


def rel_compute(u: int) -> float:
    """REL_COMPUTE for u, or that of the nearest listed width below it (the widest below 512)"""
    below = [k for k in REL_COMPUTE if k <= u]
    return REL_COMPUTE[max(below)] if below else max(REL_COMPUTE.values()) * 512 / max(u, 1)


def matmul_flops_per_token(tensors) -> float:
    """2 x the elements of the 2-D weights a prompt token multiplies (not the token
    embedding, a lookup, nor the output head, run only for the rows whose logits
    are asked for: forward.c output_head)"""
    n = 0
    for t in tensors:
        if len(t.shape) == 2 and not t.name.startswith(("token_embd", "output.")):
            n += int(t.shape[0]) * int(t.shape[1])
    return 2.0 * n


def streamed_bytes(n_tokens: int, u: int, resident_tokens: int, kv_bytes_per_token: int) -> int:
    """KV bytes a prompt of n_tokens brings across in micro-batches of u when the
    first resident_tokens positions of every attention layer stay resident:
    micro-batch j attends positions [0, j u) before its own, and each is read once
    per micro-batch (kv/stream.c)"""
    total = 0
    for j in range(-(-n_tokens // u)):
        total += max(0, j * u - resident_tokens)
    return total * kv_bytes_per_token


def prefill_seconds(n_tokens: int, u: int, flops_per_token: float, resident_tokens: int,
                    kv_bytes_per_token: int) -> float:
    """The modelled prefill time (above) of n_tokens in micro-batches of u"""
    compute = n_tokens * rel_compute(u) * flops_per_token / PREFILL_FLOPS
    return compute + streamed_bytes(n_tokens, u, resident_tokens, kv_bytes_per_token) / PCIE_BYTES_PER_S


def cheapest(costs: dict[int, float]) -> int:
    """The micro-batch of least cost; the wider one of a tie"""
    return min(costs, key=lambda u: (costs[u], -u))
