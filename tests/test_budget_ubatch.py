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
from pyllamakv.core import native as N
from pyllamakv.core.native_plan import memory_plan
from pyllamakv.memory.budget import MIB, granule, plan_budget
from pyllamakv.memory.plan import kv_plan, kv_row_bytes
from pyllamakv.memory.ubatch import cheapest, prefill_seconds, streamed_bytes
from fixtures.gpu_cases import GPU_SEQS_REFUSED

# the core plans a CUDA context only in a build with the CUDA backend (its buffers and
# kernel choices are the backend's own: native/src/memplan.c)
needs_cuda = pytest.mark.skipif(
    "cuda" not in N.ffi.string(N.lib.lkv_build_features()).decode().split(),
    reason="planning for CUDA needs a build with the CUDA backend")

HP27 = dict(arch=3, n_vocab=248320, n_embd=5120, n_layer=64, n_head=24, n_head_kv=4, head_dim=256,
            n_ff=17408, n_ctx_train=262144, rope_dim=64, rms_eps=1e-6, rope_freq_base=1e7,
            rope_freq_scale=1.0, n_nextn=0, full_attn_interval=4, ssm_conv_kernel=4,
            ssm_n_k_heads=16, ssm_n_v_heads=48, ssm_head_k_dim=128, ssm_head_v_dim=128)
IQ4_XS = 23


def _tensors(hp):
    """every tensor of the shape (fixtures/synthetic.py's list for qwen35-27b, whose
    sizes are HP27's): the matmul weights IQ4_XS, the rest f32; described, not loaded"""
    from fixtures.synthetic import SHAPES, _qwen35_tensors
    from gguf.constants import GGML_QUANT_SIZES
    from gguf import GGMLQuantizationType as GT
    s = SHAPES["qwen35-27b"]
    assert (s.n_embd, s.n_layer, s.n_ff, s.n_vocab) == (hp["n_embd"], hp["n_layer"], hp["n_ff"],
                                                        hp["n_vocab"])
    block, size = GGML_QUANT_SIZES[GT.IQ4_XS]
    out, off = [], 0
    for name, shape, kind in _qwen35_tensors(s):
        n = int(np.prod(shape))
        q = kind == "q"
        nbytes = n // block * size if q else 4 * n
        out.append(SimpleNamespace(name=name, shape=tuple(shape[::-1]), type=IQ4_XS if q else 0,
                                   nbytes=nbytes, offset=off))
        off += nbytes
    return out


TENSORS = _tensors(HP27)


def _plan(budget_mib, n_ctx=131072, **kw):
    cfg = LlamaConfig(n_ctx=n_ctx, n_batch=kw.pop("n_batch", 4096), device="cpu", n_threads=1,
                      type_k="q8_0", type_v="q4_0", gpu_memory_mib=budget_mib, **kw)
    return plan_budget(cfg, HP27, TENSORS, n_ctx, "cuda")


@needs_cuda
def test_a_16_gib_budget_lends_the_pool_to_a_wider_prefill():
    split, u = _plan(16384)
    assert u > 512 and split.pool is not None, split.describe()
    assert split.used <= split.budget
    plan = kv_plan(HP27, 131072, type_k="q8_0", type_v="q4_0")
    assert split.pool >= plan.min_pool_bytes
    # the quarter-of-free rule the budget used alone would not have taken it
    free = split.budget - split.weights - split.recurrent
    assert split.workspace > free // 4
    assert f"n_ubatch {u}:" in split.note and f"n_ubatch {u}:" in split.describe()
    # the note's figures: the chosen width is the cheapest of those listed
    costs = {int(k): float(v.split()[0]) for k, v in
             (p.split(": ") for p in split.note.split("(")[1].split(")")[0].split(", "))}
    assert u in costs and 512 in costs and costs[u] == min(costs.values())


@needs_cuda
def test_no_room_beyond_the_minimum_keeps_512():
    """a budget that leaves the plan's minimum pool at 512 and no more"""
    plan = kv_plan(HP27, 131072, type_k="q8_0", type_v="q4_0")
    ws = {u: _plan(16384, n_ubatch=u)[0].workspace for u in (512, 1024)}   # as the planner counts
    p = memory_plan(TENSORS, HP27, "cuda", n_ctx=131072, n_batch=4096, n_ubatch=512,
                    type_k="q8_0", type_v="q4_0", kv_pool_bytes=plan.min_pool_bytes)
    base = p.weights_device + p.recurrent_device + granule(plan.min_pool_bytes)
    budget = base + ws[512] + 4 * MIB
    assert budget < base + ws[1024]
    split, u = _plan(budget / MIB)
    assert u == 512 and split.pool >= plan.min_pool_bytes, split.describe()


@needs_cuda
def test_the_whole_cache_resident_at_the_widest_that_leaves_room():
    split, u = _plan(80 * 1024, n_ctx=32768)
    assert split.pool is None and u == 4096, split.describe()
    n_batch = 2048
    split, u = _plan(80 * 1024, n_ctx=32768, n_batch=n_batch)
    assert split.pool is None and u == n_batch


@needs_cuda
def test_a_given_n_ubatch_is_kept():
    split, u = _plan(16384, n_ubatch=512)
    assert u == 512 and split.note == ""


@needs_cuda
def test_several_sequences_of_a_hybrid_are_planned_by_the_core():
    """n_seq_max > 1 for this hybrid on CUDA: the core holds a recurrent state
    (and its snapshots) per sequence in one context, and its plan counts each
    (until they are verified on a GPU, a build without -DLKV_GPU_SEQS=1 refuses
    several sequences of a hybrid there: skipped)."""
    kw = dict(n_ctx=65536, n_batch=4096, n_ubatch=512, type_k="q8_0", type_v="q4_0")
    one = memory_plan(TENSORS, HP27, "cuda", n_seq_max=1, **kw)
    try:
        three = memory_plan(TENSORS, HP27, "cuda", n_seq_max=3, **kw)
    except Exception as e:   # noqa: BLE001 - only the core's GPU refusal skips
        if GPU_SEQS_REFUSED in str(e):
            pytest.skip(f"this library holds one hybrid sequence per context on the GPU: {e}")
        raise
    assert one.recurrent > 0 and three.recurrent == 3 * one.recurrent
    split, u = _plan(16384, n_ctx=65536, n_seq_max=2)
    assert split.used <= split.budget, split.describe()


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


@needs_cuda
def test_the_arena_is_the_micro_batch_buffers_once():
    """the workspace the core plans for a budgeted CUDA context: one arena of the
    micro-batch's buffers and a decode set of 16 rows beside it"""
    kw = dict(n_ctx=131072, n_batch=4096, type_k="q8_0", type_v="q4_0",
              kv_pool_bytes=kv_plan(HP27, 131072, type_k="q8_0", type_v="q4_0").min_pool_bytes)
    a = memory_plan(TENSORS, HP27, "cuda", n_ubatch=2048, **kw)
    plain = memory_plan(TENSORS, HP27, "cuda", n_ubatch=2048, phase_arena=False, **kw)
    assert a.phase_arena == 1 and a.workspace >= plain.workspace
    assert 0 < a.workspace_decode < a.workspace
