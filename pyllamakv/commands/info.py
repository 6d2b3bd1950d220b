"""What ``pyllamakv info`` reports about a GGUF file: sizes, types, KV costs, plans.

Reads the file's metadata and tensor table only; no weights are loaded.
"""
from __future__ import annotations

from collections import Counter

from ..core.native import TYPE_NAMES, _is_kv, cuda_device_count, model_params
from ..gguf.arch_gemma3 import swa_lines
from ..gguf.arch_moe import moe_lines
from ..gguf.arch_qwen35 import hybrid_lines
from ..memory.budget import plan_budget
from ..config import LlamaConfig, requested_pool_bytes
from ..gguf.reader import GGUFFile
from ..memory.plan import (LINK_BYTES_PER_S, auto_pool_bytes, kv_bytes_per_token, kv_plan,
                           local_kv_bytes)

GIB, MIB = 1 << 30, 1 << 20
ARCH_NAMES = {0: "llama", 1: "qwen2", 2: "qwen3"}


def _size(n: float) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / MIB:.1f} MiB"


def describe(path: str, n_ctx: int | None = None, mem_gib: float | None = None,
             kv_pool_mib: float | str | None = None, type_k: str = "f16",
             type_v: str = "f16", n_ubatch: int = 512,
             gpu_memory_mib: float | None = None) -> list[str]:
    """Report lines for the model at path (and for a context of n_ctx, if given)."""
    f = GGUFFile(path)
    hp = model_params(f)
    n_params = sum(_elements(t.shape) for t in f.tensors)
    weight_bytes = sum(t.nbytes for t in f.tensors)
    types = Counter(TYPE_NAMES.get(t.type, str(t.type)) for t in f.tensors)
    lines = [
        f"file:          {path}",
        f"name:          {f.get('general.name', '?')}",
        f"architecture:  {f.architecture}",
        f"layers:        {hp['n_layer']}   embedding: {hp['n_embd']}   ffn: {hp['n_ff']}",
        f"heads:         {hp['n_head']} (kv {hp['n_head_kv']}) x {hp['head_dim']}",
        f"vocab:         {hp['n_vocab']}   trained context: {hp['n_ctx_train']}",
        f"parameters:    {n_params / 1e6:.1f} M",
        f"weights:       {_size(weight_bytes)} ({weight_bytes} bytes)",
        "tensor types:  " + ", ".join(f"{n} x {t}" for t, n in sorted(types.items())),
    ] + hybrid_lines(hp) + swa_lines(hp) + moe_lines(hp, f.architecture) + [
        "KV bytes per token (K and V, all attention layers):",
    ]
    kv_types = [n for i, n in sorted(TYPE_NAMES.items()) if _is_kv(i)]
    per_token = {t: kv_bytes_per_token(hp, t, t) for t in kv_types}
    for t in kv_types:
        row = f"  {t:8s} {per_token[t]:>9d} B"
        if n_ctx:
            row += f"   {n_ctx} tokens: {_size(per_token[t] * n_ctx)}"
        if mem_gib:
            free = mem_gib * GIB - weight_bytes
            fits = max(0, int(free // per_token[t]))
            row += f"   fits in {mem_gib:g} GiB after weights: {fits} tokens"
        lines.append(row)
    if n_ctx and (gpu_memory_mib is not None or kv_pool_mib is not None):
        # the parameters a Llama would get, checked where a Llama's are (config.py)
        cfg = LlamaConfig(n_ctx, n_ubatch=n_ubatch, type_k=type_k, type_v=type_v,
                          kv_pool_mib=kv_pool_mib, gpu_memory_mib=gpu_memory_mib)
        device = "cuda" if cuda_device_count() else "cpu"
        if gpu_memory_mib is not None:   # how Llama(gpu_memory_mib=...) splits the budget
            split = plan_budget(cfg, hp, f.tensors, n_ctx, device)[0]
            lines += [split.describe()]
            pool = split.pool
        elif kv_pool_mib == "auto":      # on CUDA: free memory less these weights and a margin
            pool = auto_pool_bytes(hp, n_ctx, device, reserve_bytes=weight_bytes,
                                   type_k=type_k, type_v=type_v)
        else:
            pool = requested_pool_bytes(cfg)
        lines += _plan_lines(hp, n_ctx, pool, type_k, type_v, n_ubatch)
    return lines


def _plan_lines(hp, n_ctx, pool_bytes, type_k, type_v, n_ubatch) -> list[str]:
    plan = kv_plan(hp, n_ctx, type_k=type_k, type_v=type_v, n_ubatch=n_ubatch,
                   pool_bytes=pool_bytes)
    full = kv_plan(hp, n_ctx, type_k=type_k, type_v=type_v, n_ubatch=n_ubatch)
    s = plan.streamed_bytes
    bound = f"{LINK_BYTES_PER_S / s:.1f} tokens/s" if s else "none (all resident)"
    local = local_kv_bytes(hp, n_ctx, type_k, type_v) if pool_bytes is not None else 0
    return ([
        f"plan for {n_ctx} tokens, K {type_k} / V {type_v}, pool "
        + ("unbounded (all resident):" if pool_bytes is None else f"{pool_bytes / MIB:g} MiB:"),
        f"  full KV cache:            {_size(full.pool_bytes)}",
        f"  minimum pool:             {_size(plan.min_pool_bytes)}",
        f"  resident fraction:        {plan.resident_fraction:.3f} "
        f"({plan.resident_chunks} of {plan.n_chunks * len(plan.resident)} chunks)",
        f"  ring:                     {_size(plan.ring_bytes)}",
        f"  streamed per token:       {_size(s)} ({s} bytes)",
        f"  decode bound at 55 GB/s:  {bound}",
    ] + ([f"  local layers beside pool: {_size(local)} (sliding window: a ring of the window "
          "and n_batch rows each, resident, not planned or streamed)"] if local else []))


def _elements(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n
