"""The KV pool and the micro-batch a Llama's context is made with, from its
settings: a gpu_memory_mib budget's split (budget.py), else the one planner
call (plan.py: the core refuses a pool below its minimum, by name), with the
micro-batch chosen once the pool is known where the user left it unset
(ubatch.py)."""
from __future__ import annotations

from ..config import LlamaConfig, requested_pool_bytes
from .plan import auto_pool_bytes, kv_plan, whole_cache_bytes
from .ubatch import chosen_ubatch


def pool_and_ubatch(cfg: LlamaConfig, hp: dict, n_ctx: int, device: str, n_batch: int,
                    type_k, type_v, budget=None, tensors=()) -> tuple[int | None, int]:
    """(kv_pool_bytes, n_ubatch); None: all resident. budget: plan_budget's
    (BudgetSplit, n_ubatch) or None; tensors: the GGUF's (the core's memory plan
    measures each micro-batch's buffers: ubatch.chosen_ubatch)."""
    n_ubatch = cfg.n_ubatch or 512
    if budget is not None:
        return budget[0].pool, budget[1]
    plan = kv_plan(hp, n_ctx, type_k=type_k, type_v=type_v,
                   pool_bytes=requested_pool_bytes(cfg), n_ubatch=min(n_ubatch, n_batch))
    if cfg.kv_pool_mib == "auto":
        pool = auto_pool_bytes(hp, n_ctx, device, full=plan, n_seq=cfg.n_seq_max)
    else:   # above the whole cache (of every sequence): clamped to it, with a warning
        whole = whole_cache_bytes(plan)
        pool = requested_pool_bytes(cfg, whole and whole * cfg.n_seq_max)
    if cfg.n_ubatch is None:
        n_ubatch = chosen_ubatch(tensors, hp, device, cfg, n_ctx, pool)
    return pool, n_ubatch
