"""KV sizes and the residency plan, from a model's hyper-parameters.

Thin arithmetic over the core: row sizes come from ``lkv_row_bytes`` and the
plan from the core's pure planner ``lkv_plan_compute``, so what ``info``
prints and what "auto" picks are exactly what a context would do.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core.ffi import ffi, lib
from ..core.native import _check, type_id
from ..gguf.arch_gemma3 import n_layer_local
from ..gguf.arch_qwen35 import n_layer_kv, recurrent_bytes

KV_CHUNK = 256          # the core's default positions per chunk (kv_chunk=0)
STATE_COPIES = 3        # a hybrid's live recurrent state and the core's default 2 snapshots
LINK_BYTES_PER_S = 55e9  # the host->device link that info's decode bound assumes
PLAN_ALIGN = 256        # kv/plan.h LKV_PLAN_ALIGN: a sequence's share of the pool, in steps


@dataclass(slots=True)
class KVPlan:
    n_tokens: int
    n_chunks: int            # chunks per layer holding n_tokens
    resident_chunks: int     # over all layers
    ring_bytes: int
    pool_bytes: int          # what the pool needs (<= the bound)
    min_pool_bytes: int
    streamed_bytes: int      # host -> device per decoded token
    resident: list[int]      # per layer

    @property
    def resident_fraction(self) -> float:
        total = self.n_chunks * len(self.resident)
        return 1.0 if total == 0 else self.resident_chunks / total


def kv_row_bytes(hparams: dict, kv_type: str | int) -> int:
    """Bytes of one token's K (or V) in one layer."""
    return int(lib.lkv_row_bytes(type_id(kv_type, kv=True),
                                 hparams["n_head_kv"] * hparams["head_dim"]))


def kv_bytes_per_token(hparams: dict, type_k: str | int, type_v: str | int) -> int:
    """K and V bytes of one position over every attention layer."""
    return n_layer_kv(hparams) * (kv_row_bytes(hparams, type_k) + kv_row_bytes(hparams, type_v))


def kv_plan(hparams: dict, n_ctx: int, *, type_k: str | int = "f16", type_v: str | int = "f16",
            pool_bytes: int | None = None, n_tokens: int | None = None, n_ubatch: int = 512,
            kv_chunk: int = KV_CHUNK) -> KVPlan:
    """The core's plan for a cache of n_ctx positions holding n_tokens (default n_ctx).
    With a pool bound a sliding-window model's local layers are not planned (they
    stay resident beside the pool: local_kv_bytes)."""
    p = ffi.new("lkv_plan_params *")
    p.n_layer = n_layer_kv(hparams) - (0 if pool_bytes is None else n_layer_local(hparams))
    p.kv_chunk = kv_chunk
    p.row_bytes_k = kv_row_bytes(hparams, type_k)
    p.row_bytes_v = kv_row_bytes(hparams, type_v)
    p.n_ctx = n_ctx
    p.n_ubatch = n_ubatch
    p.pool_bytes = -1 if pool_bytes is None else int(pool_bytes)
    n = n_ctx if n_tokens is None else n_tokens
    out = ffi.new("lkv_plan *")
    res = ffi.new("int32_t[]", p.n_layer)
    _check(lib.lkv_plan_compute(p, n, out, res), "KV plan")
    return KVPlan(n, out.n_chunks, out.resident_chunks, out.ring_bytes, out.pool_bytes,
                  out.min_pool_bytes, out.streamed_bytes, list(res))


def local_kv_bytes(hparams: dict, n_ctx: int, type_k: str | int = "f16",
                   type_v: str | int = "f16", n_batch: int = 512) -> int:
    """A sliding-window model's local layers' KV beside a bounded pool: a ring of
    window - 1 + n_batch rows each (n_ctx where that is less; kv/cache.h)."""
    window = hparams.get("swa_window", 0)
    rows = min(n_ctx, window - 1 + min(n_batch, n_ctx)) if window else n_ctx
    return n_layer_local(hparams) * rows * (kv_row_bytes(hparams, type_k)
                                            + kv_row_bytes(hparams, type_v))


def whole_cache_bytes(plan: KVPlan) -> int | None:
    """The whole cache's bytes where plan (of a full context) holds all of it
    resident; None where it streams (its pool is then below the whole cache)."""
    return plan.pool_bytes if plan.ring_bytes == 0 else None


def sequences_pool_bytes(share_bytes: int, n_seq: int) -> int:
    """The least pool whose split among n_seq active sequences gives each at
    least share_bytes (kv/plan.h lkv_plan_shares: equal shares, each rounded
    down to PLAN_ALIGN bytes)."""
    if n_seq <= 1:
        return share_bytes
    return n_seq * (-(-share_bytes // PLAN_ALIGN) * PLAN_ALIGN)


def share_bytes(pool_bytes: int, n_seq: int) -> int:
    """Each sequence's share of a pool when n_seq sequences are active (kv/plan.h)."""
    return pool_bytes if n_seq <= 1 else pool_bytes // n_seq // PLAN_ALIGN * PLAN_ALIGN


def cuda_free_bytes() -> int:
    free, total = ffi.new("int64_t *"), ffi.new("int64_t *")
    _check(lib.lkv_cuda_mem_info(free, total), "CUDA memory info")
    return int(free[0])


def auto_pool_bytes(hparams: dict, n_ctx: int, device: str, reserve_bytes: int = 0,
                    full: KVPlan | None = None, n_seq: int = 1, **kv) -> int | None:
    """kv_pool_mib="auto": the pool a context of n_seq sequences gets (one pool
    for all of them, kv/plan.h); None means all resident.

    CUDA: the free device memory (measured after the weights are loaded; less
    ``reserve_bytes`` for memory still to be taken, e.g. weights not yet loaded,
    and a hybrid's recurrent state with its snapshots, which the context
    allocates beside the pool) less a margin of 512 MiB + 5% for the context's
    own buffers and the runtime;
    when the whole cache of every sequence fits there, no bound at all. CPU: a
    quarter of each sequence's full cache, but at least the plan's minimum (the
    CPU's "device" pool is an emulation that exercises streaming, so it is kept
    deliberately small), times n_seq. Either way every one of n_seq active
    sequences gets at least a sequence's minimum pool.
    full: the plan of one sequence's whole cache (kv_plan without a pool), when
    the caller has it already; else it is computed from kv.
    """
    if full is None:
        full = kv_plan(hparams, n_ctx, **kv)
    least = sequences_pool_bytes(full.min_pool_bytes, n_seq)
    if device == "cuda":
        free = cuda_free_bytes() - reserve_bytes - STATE_COPIES * recurrent_bytes(hparams)
        budget = free - (512 << 20) - free // 20
        if budget >= n_seq * full.pool_bytes:
            return None
        return max(budget, least)
    return max(sequences_pool_bytes(full.pool_bytes // 4, n_seq), least)
