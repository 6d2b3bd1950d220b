"""The phase arena (native/src/arena.h) on the CPU's emulated device, where it
is off by default and phase_arena=True turns it on: the planner's extra
resident chunks (lkv_plan_params.arena_bytes, kv/plan.h), logits bit-identical
to the all-resident run and to the run without the arena through prefill /
decode alternation and a truncate, the statistics against the planner, and
the budget's accounting of the arena. tests/test_cuda_arena.py runs the same
script on CUDA, where the arena is on by default."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from hypothesis import given, settings
from hypothesis import strategies as st

from pyllamakv import errors
from pyllamakv.core.ffi import ffi, lib
from pyllamakv.core.native import Context, Model
from arena_script import DECODE_ROWS, check_stats, row_sizes, run
from fixtures.tiny_models import tiny_model_fixture

CHUNK = 16


tiny = tiny_model_fixture("qwen3", n_layer=3)


# ---------------------------------------------------------------- planner

def _plan(L, C, rbk, rbv, n_ctx, pool, n, arena):
    p = ffi.new("lkv_plan_params *", dict(n_layer=L, kv_chunk=C, row_bytes_k=rbk,
                                          row_bytes_v=rbv, n_ctx=n_ctx, n_ubatch=32,
                                          pool_bytes=pool, arena_bytes=arena))
    out = ffi.new("lkv_plan *")
    res = ffi.new("int32_t[]", L)
    status = lib.lkv_plan_compute(p, n, out, res)
    return status, out, list(res)


@settings(max_examples=200, deadline=None)
@given(L=st.integers(1, 40), C=st.sampled_from([16, 64, 256]), rbk=st.integers(1, 4096),
       rbv=st.integers(1, 4096), n_ctx=st.integers(1, 100_000), frac=st.floats(0.0, 1.2),
       afrac=st.floats(0.0, 1.2), data=st.data())
def test_planner_arena_chunks(L, C, rbk, rbv, n_ctx, frac, afrac, data):
    cb = C * (rbk + rbv)
    nc_max = -(-n_ctx // C)
    pool = int(frac * L * nc_max * cb)
    arena = int(afrac * L * nc_max * cb)
    if _plan(L, C, rbk, rbv, n_ctx, pool, n_ctx, 0)[0] != 0:
        return   # below the minimum pool: test_stream.py's
    prev = None
    for n in sorted(data.draw(st.lists(st.integers(0, n_ctx), min_size=2, max_size=10))):
        s0, base, base_res = _plan(L, C, rbk, rbv, n_ctx, pool, n, 0)
        s1, got, res = _plan(L, C, rbk, rbv, n_ctx, pool, n, arena)
        assert s0 == 0 and s1 == 0
        e = got.arena_chunks
        if base.ring_bytes == 0:     # nothing streams: the arena is not used
            assert e == 0 and res == base_res
            assert got.pool_bytes == base.pool_bytes and got.streamed_bytes == 0
            continue
        # whole chunks of the arena per layer, after the pool's, never past the last chunk
        assert e == min(arena // (L * cb), nc_max - base_res[0])
        assert res == [r + e for r in base_res]
        assert e * L * cb <= arena
        assert got.ring_bytes == base.ring_bytes and got.pool_bytes == base.pool_bytes
        assert sum(res) * cb + got.ring_bytes == got.pool_bytes + L * e * cb
        assert got.resident_chunks == sum(res)
        rows = max(0, n - 1 - res[0] * C)
        assert got.streamed_bytes == L * rows * (rbk + rbv)
        assert base.streamed_bytes - got.streamed_bytes == \
            L * min(e * C, max(0, n - 1 - base_res[0] * C)) * (rbk + rbv)
        if prev is not None:         # constant while the context grows
            assert res == prev
        prev = res


def test_planner_refuses_a_negative_arena():
    status, _, _ = _plan(2, 16, 64, 64, 256, 4 * 16 * 128, 100, -1)
    assert status == errors.InvalidArgumentError.status
    assert "arena_bytes" in ffi.string(lib.lkv_last_error()).decode()


# ---------------------------------------------------------------- end to end

def _cb(m):
    rbk, rbv = row_sizes(m)
    return CHUNK * (rbk + rbv)


@pytest.mark.parametrize("pools", [(2, 7), (20, 50)])
def test_arena_is_bit_identical_and_planned(tiny, pools):
    rng = np.random.default_rng()
    tokens = rng.integers(0, 320, 420).tolist()
    ref, _ = run(tiny, tokens, None, None, n_threads=2)
    saved = 0
    for k in pools:     # the minimum pool; a few resident chunks; much resident
        pool = k * _cb(tiny)
        got, calls = run(tiny, tokens, pool, True, n_threads=2)
        off, ref_calls = run(tiny, tokens, pool, False, n_threads=2)
        assert np.array_equal(off, ref), f"pool {pool} without the arena: max diff " \
                                         f"{np.abs(off - ref).max()}"
        assert np.array_equal(got, ref), f"pool {pool} with the arena: max diff " \
                                         f"{np.abs(got - ref).max()}"
        assert all(c[3]["arena_bytes"] == 0 for c in ref_calls)
        saved += check_stats(tiny, calls, ref_calls, pool, chunk=CHUNK)
    assert saved > 0     # the arena's chunks were not streamed


def test_arena_is_off_where_it_cannot_help(tiny):
    cb = _cb(tiny)
    for kw in (dict(kv_pool_bytes=None), dict(kv_pool_bytes=4 * cb, n_ubatch=DECODE_ROWS),
               dict(kv_pool_bytes=8 * cb, n_seq_max=2), dict(kv_pool_bytes=4 * cb)):
        arena = None if kw == dict(kv_pool_bytes=4 * cb) else True   # None: CPU default, off
        with Context(tiny, n_ctx=256, kv_chunk=CHUNK, phase_arena=arena, **kw) as c:
            c.decode([1, 2, 3])
            assert c.kv_stats()["arena_bytes"] == 0, kw


def test_phase_arena_value_is_checked(tiny):
    p = ffi.new("lkv_context_params *")
    lib.lkv_context_params_init(p)
    assert p.phase_arena == -1
    p.phase_arena = 2
    out = ffi.new("lkv_context **")
    assert lib.lkv_context_create(tiny.ptr, p, out) == errors.InvalidArgumentError.status
    assert "phase_arena" in ffi.string(lib.lkv_last_error()).decode()


# ---------------------------------------------------------------- budget

def test_budget_counts_the_arena_once(tiny):
    """The core's arena is the sum of the micro-batch buffers (each rounded to
    256 bytes); budget.py counts it as one allocation beside the decode set."""
    from pyllamakv.memory.budget import (ARENA_ALIGN, DECODE_ROWS as ROWS, micro_batch_buffers,
                                  workspace_allocations)
    hp = tiny.hparams
    assert ROWS == DECODE_ROWS
    with Context(tiny, n_ctx=256, n_ubatch=64, kv_chunk=CHUNK, kv_pool_bytes=4 * _cb(tiny),
                 phase_arena=True) as c:
        got = c.kv_stats()["arena_bytes"]
    big = micro_batch_buffers(hp, 64)
    assert got == sum(-(-b // ARENA_ALIGN) * ARENA_ALIGN for b in big)
    plain = workspace_allocations(hp, 64, streaming=True)
    lent = workspace_allocations(hp, 64, streaming=True, arena=True)
    assert got in lent and not set(big) & set(lent[:1])
    assert sum(lent) - sum(plain) == got - sum(big) + sum(micro_batch_buffers(hp, ROWS))
    # no pool, or a narrow micro-batch: no arena
    assert workspace_allocations(hp, 64, arena=True) == workspace_allocations(hp, 64)
    assert workspace_allocations(hp, ROWS, streaming=True, arena=True) == \
        workspace_allocations(hp, ROWS, streaming=True)


def test_arena_on_a_hybrid(tmp_path):
    """qwen35: the gate and DeltaNet rows are in the arena too; only the
    full-attention layers have KV chunks."""
    from fixtures.tiny_qwen35 import write_tiny_qwen35
    with Model(write_tiny_qwen35(tmp_path / "q35.gguf", T.Q8_0, seed=4)) as m:
        tokens = np.random.default_rng().integers(0, 320, 420).tolist()
        ref, _ = run(m, tokens, None, None, n_threads=2, truncate=False)
        pool = 3 * CHUNK * sum(row_sizes(m)) * m.n_layer_kv
        got, calls = run(m, tokens, pool, True, n_threads=2, truncate=False)
        off, ref_calls = run(m, tokens, pool, False, n_threads=2, truncate=False)
        assert np.array_equal(off, ref) and np.array_equal(got, ref), \
            f"max diff {np.abs(got - ref).max()}"
        assert check_stats(m, calls, ref_calls, pool, chunk=CHUNK) > 0
