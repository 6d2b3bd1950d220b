"""n_ubatch inside gpu_memory_mib on CUDA (memory/budget.py plan_budget,
memory/ubatch.py's prefill model), planned on the CPU for a Qwen3.5-27B-shaped
hybrid (64 layers, 16 of them full attention with 4 KV heads of 256; 48
DeltaNet layers of 16 / 48 heads of 128; vocabulary 248320) whose weights are
described, not loaded.

With a bounded pool the prefill workspace is the phase arena, lent to the KV
for decode: a wider micro-batch costs pool only while a prompt is read. The
planner takes every width whose pool still meets the plan's minimum and picks
the least modelled prefill time of an n_ctx prompt; without room for more it
keeps 512; all resident, the widest that leaves room for the whole cache.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from pyllamakv.config import LlamaConfig
from pyllamakv.memory.budget import (MIB, granule, micro_batch_buffers, plan_budget,
                                     recurrent_device_bytes, weight_device_bytes,
                                     workspace_allocations)
from pyllamakv.memory.plan import kv_plan, kv_row_bytes
from pyllamakv.memory.ubatch import cheapest, prefill_seconds, streamed_bytes

HP27 = dict(arch=3, n_vocab=248320, n_embd=5120, n_layer=64, n_head=24, n_head_kv=4, head_dim=256,
            n_ff=17408, n_ctx_train=262144, rope_dim=64, rms_eps=1e-6, rope_freq_base=1e7,
            rope_freq_scale=1.0, n_nextn=0, full_attn_interval=4, ssm_conv_kernel=4,
            ssm_n_k_heads=16, ssm_n_v_heads=48, ssm_head_k_dim=128, ssm_head_v_dim=128)
IQ4_XS = 23


def _tensors(hp, bits=4.25):
    """the 2-D weights of the shape (IQ4_XS-sized), one allocation each"""
    E, F = hp["n_embd"], hp["n_ff"]
    nq, nkv = hp["n_head"] * hp["head_dim"], hp["n_head_kv"] * hp["head_dim"]
    vd = hp["ssm_n_v_heads"] * hp["ssm_head_v_dim"]
    cd = 2 * hp["ssm_n_k_heads"] * hp["ssm_head_k_dim"] + vd
    shapes = [("token_embd.weight", (hp["n_vocab"], E)), ("output.weight", (hp["n_vocab"], E))]
    for i in range(hp["n_layer"]):
        b = f"blk.{i}."
        shapes += [(b + "ffn_gate.weight", (F, E)), (b + "ffn_up.weight", (F, E)),
                   (b + "ffn_down.weight", (E, F))]
        if (i + 1) % hp["full_attn_interval"] == 0:
            shapes += [(b + "attn_q.weight", (2 * nq, E)), (b + "attn_k.weight", (nkv, E)),
                       (b + "attn_v.weight", (nkv, E)), (b + "attn_output.weight", (E, nq))]
        else:
            shapes += [(b + "attn_qkv.weight", (cd, E)), (b + "attn_gate.weight", (vd, E)),
                       (b + "ssm_out.weight", (E, vd))]
    out, off = [], 0
    for name, shape in shapes:
        nbytes = int(shape[0] * shape[1] * bits / 8)
        out.append(SimpleNamespace(name=name, shape=shape, type=IQ4_XS, nbytes=nbytes, offset=off))
        off += nbytes
    return out


TENSORS = _tensors(HP27)


def _plan(budget_mib, n_ctx=131072, **kw):
    cfg = LlamaConfig(n_ctx=n_ctx, n_batch=kw.pop("n_batch", 4096), device="cpu", n_threads=1,
                      type_k="q8_0", type_v="q4_0", gpu_memory_mib=budget_mib, **kw)
    return plan_budget(cfg, HP27, TENSORS, n_ctx, "cuda")


def test_a_16_gib_budget_lends_the_pool_to_a_wider_prefill():
    split, u = _plan(16384)
    assert u > 512 and split.pool is not None, split.describe()
    assert split.used <= split.budget
    plan = kv_plan(HP27, 131072, type_k="q8_0", type_v="q4_0")
    assert split.pool >= plan.min_pool_bytes
    # the quarter-of-free rule the budget used alone would not have taken it
    free = split.budget - split.weights - split.recurrent
    alloc = sum(workspace_allocations(HP27, u, streaming=True, arena=True,
                                      row_bytes_k=kv_row_bytes(HP27, "q8_0"),
                                      row_bytes_v=kv_row_bytes(HP27, "q4_0")))
    assert alloc > free // 4
    assert f"n_ubatch {u}:" in split.note and f"n_ubatch {u}:" in split.describe()
    # the note's figures: the chosen width is the cheapest of those listed
    costs = {int(k): float(v.split()[0]) for k, v in
             (p.split(": ") for p in split.note.split("(")[1].split(")")[0].split(", "))}
    assert u in costs and 512 in costs and costs[u] == min(costs.values())


def test_no_room_beyond_the_minimum_keeps_512():
    """a budget that leaves the plan's minimum pool at 512 and no more"""
    plan = kv_plan(HP27, 131072, type_k="q8_0", type_v="q4_0")
    ws = {u: _plan(16384, n_ubatch=u)[0].workspace for u in (512, 1024)}   # as the planner counts
    base = weight_device_bytes(TENSORS) + recurrent_device_bytes(HP27) + granule(plan.min_pool_bytes)
    budget = base + ws[512] + 4 * MIB
    assert budget < base + ws[1024]
    split, u = _plan(budget / MIB)
    assert u == 512 and split.pool >= plan.min_pool_bytes, split.describe()


def test_the_whole_cache_resident_at_the_widest_that_leaves_room():
    split, u = _plan(80 * 1024, n_ctx=32768)
    assert split.pool is None and u == 4096, split.describe()
    n_batch = 2048
    split, u = _plan(80 * 1024, n_ctx=32768, n_batch=n_batch)
    assert split.pool is None and u == n_batch


def test_a_given_n_ubatch_is_kept():
    split, u = _plan(16384, n_ubatch=512)
    assert u == 512 and split.note == ""


def test_several_sequences_have_no_arena_to_lend():
    """n_seq_max > 1: no phase arena (arena.h), the workspace stays beside the
    pool, so the quarter-of-free rule keeps the budget's old choice"""
    split, u = _plan(16384, n_ctx=65536, n_seq_max=2)
    assert split.note == "" and u == 512, split.describe()


def test_streamed_bytes_and_the_model(rng=np.random.default_rng()):
    for _ in range(20):
        n = int(rng.integers(1, 300000))
        u = int(rng.choice([512, 1024, 2048, 4096]))
        r = int(rng.integers(0, 300000))
        b = int(rng.integers(1, 100000))
        s = streamed_bytes(n, u, r, b)
        j = np.arange(-(-n // u))
        assert s == int(np.maximum(j * u - r, 0).sum()) * b
        assert s == 0 if r >= (len(j) - 1) * u else s > 0
        assert streamed_bytes(n, u, r + u, b) <= s            # more resident, less streamed
        assert streamed_bytes(n, 2 * u, r, b) <= s            # wider, fewer passes
    # with nothing streamed the wider micro-batch wins on compute alone
    c = {u: prefill_seconds(32768, u, 5e10, 1 << 20, 30000) for u in (512, 1024, 2048, 4096)}
    assert cheapest(c) == 4096 and c[512] > c[2048] > c[4096]
    # a wider one that must stream what the narrower keeps resident can lose
    c = {512: prefill_seconds(65536, 512, 1e8, 65536, 1 << 20),
         4096: prefill_seconds(65536, 4096, 1e8, 0, 1 << 20)}
    assert cheapest(c) == 512
    assert cheapest({512: 1.0, 1024: 1.0}) == 1024


def test_the_arena_is_the_micro_batch_buffers_once():
    """the workspace counted for a budgeted CUDA context: one arena of the
    micro-batch's buffers and a decode set of 16 rows beside it"""
    a = workspace_allocations(HP27, 2048, streaming=True, arena=True)
    assert a[0] >= sum(micro_batch_buffers(HP27, 2048))
    assert a[1:1 + len(micro_batch_buffers(HP27, 16))] == micro_batch_buffers(HP27, 16)
