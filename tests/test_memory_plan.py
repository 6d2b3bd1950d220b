"""The core's memory plan (lkv_memory_plan_compute, core/native_plan.py): the dry
run's figures are those of the context the same parameters make, nothing is
allocated, refusals are the context's, and on a CUDA build the prefill GEMM's
scratch follows the kernel chooser (iq4_xs takes gemm_wg on sm_90a)."""
from __future__ import annotations

import random

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from fixtures.tiny_models import write_tiny_model
from fixtures.tiny_qwen35 import write_tiny_qwen35
from pyllamakv.core import native as N
from pyllamakv.core.native_plan import memory_plan
from pyllamakv.errors import PoolTooSmallError, UnsupportedError
from pyllamakv.memory.budget import granule
from pyllamakv.memory.plan import kv_bytes_per_token, kv_plan


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = write_tiny_model(tmp_path_factory.mktemp("plan") / "t.gguf", "llama", T.Q8_0,
                            seed=random.randrange(1 << 20))
    with N.Model(path, n_threads=1) as m:
        yield m


def _plan(m, device="cpu", **kw):
    return memory_plan(m.file.tensors, m.hparams, device, **kw)


def test_all_resident_is_the_contexts_cache(tiny):
    n_ctx = random.choice([128, 256, 384])
    kvt = random.choice(["f16", "q8_0", "q4_0"])
    p = _plan(tiny, n_ctx=n_ctx, type_k=kvt, type_v=kvt)
    with N.Context(tiny, n_ctx=n_ctx, type_k=kvt, type_v=kvt) as c:
        st = c.kv_stats()
    assert p.kv == st["pool_bytes"] == n_ctx * kv_bytes_per_token(tiny.hparams, kvt, kvt)
    assert p.kv_pool == p.kv_ring == p.host == 0 and p.phase_arena == 0
    assert p.weights == tiny.weight_bytes        # every tensor of the file, once
    assert p.device_total >= p.kv + p.workspace + p.logits and p.kv_device >= p.kv


def test_a_pool_is_the_contexts_pool_ring_and_host_store(tiny):
    n_ctx, chunk = 512, 64
    full = kv_plan(tiny.hparams, n_ctx, kv_chunk=chunk)
    pool = full.min_pool_bytes + random.randrange(4) * 4096
    kw = dict(n_ctx=n_ctx, kv_chunk=chunk, kv_pool_bytes=pool, n_ubatch=64, phase_arena=True)
    p = _plan(tiny, **kw)
    with N.Context(tiny, **kw) as c:
        st = c.kv_stats()
    assert p.kv_pool == pool == st["pool_bytes"]
    assert p.workspace == st["arena_bytes"] > 0 and p.phase_arena == 1
    assert p.host == n_ctx * kv_bytes_per_token(tiny.hparams, "f16", "f16")
    ring = kv_plan(tiny.hparams, n_ctx, pool_bytes=pool, n_ubatch=64, kv_chunk=chunk).ring_bytes
    assert p.kv_ring == ring
    assert p.kv > pool                           # and the stream's micro-batch rows


def test_sequences_share_one_pool(tiny):
    n = random.randint(2, 4)
    one = kv_plan(tiny.hparams, 256, kv_chunk=64)
    pool = n * one.pool_bytes // 2
    p = _plan(tiny, n_ctx=256, kv_chunk=64, kv_pool_bytes=pool, n_seq_max=n)
    resident = _plan(tiny, n_ctx=256, kv_chunk=64, n_seq_max=n)
    assert p.kv_pool == pool and resident.kv == n * _plan(tiny, n_ctx=256).kv
    assert p.logits_wide > 0                     # a batched step keeps a row per sequence


def test_hybrid_recurrent_state_and_snapshots(tmp_path):
    path = write_tiny_qwen35(tmp_path / "q35.gguf", seed=random.randrange(1 << 20))
    with N.Model(path, n_threads=1) as m:
        snaps = random.randint(0, 3)
        with N.Context(m, n_ctx=64, n_state_snapshots=snaps) as c:
            live = c.recurrent_bytes
        p = _plan(m, n_ctx=64, n_state_snapshots=snaps)
    assert live > 0 and p.recurrent == (1 + snaps) * live
    assert p.recurrent_device == (1 + snaps) * granule(live)


def test_nothing_is_allocated(tiny):
    """A cache of hundreds of GiB is planned, not made (all resident, and as a
    pool's host store)."""
    n_ctx = 1 << 26
    per = kv_bytes_per_token(tiny.hparams, "f32", "f32")
    p = _plan(tiny, n_ctx=n_ctx, type_k="f32", type_v="f32")
    assert p.kv == n_ctx * per > 64 << 30
    q = _plan(tiny, n_ctx=n_ctx, type_k="f32", type_v="f32", kv_pool_bytes=1 << 30)
    assert q.host == n_ctx * per and q.kv_pool == 1 << 30


def test_refusals_are_the_contexts(tiny):
    with pytest.raises(PoolTooSmallError, match="below the minimum"):
        _plan(tiny, n_ctx=1024, kv_pool_bytes=1000)
    with pytest.raises(PoolTooSmallError, match="below the minimum"):
        N.Context(tiny, n_ctx=1024, kv_pool_bytes=1000)
    with pytest.raises(ValueError, match="KV cache type"):
        _plan(tiny, n_ctx=64, type_k="q4_k")
    with pytest.raises(Exception, match="n_ctx"):
        _plan(tiny, n_ctx=0)


def test_the_micro_batch_is_capped_as_the_context_caps_it(tiny):
    p = _plan(tiny, n_ctx=100, n_batch=64, n_ubatch=512)
    with N.Context(tiny, n_ctx=100, n_batch=64, n_ubatch=512) as c:
        assert p.n_ubatch == c.n_ubatch == 64


def _cuda_built() -> bool:
    return "cuda" in N.ffi.string(N.lib.lkv_build_features()).decode().split()


@pytest.mark.skipif(_cuda_built(), reason="this build has the CUDA backend")
def test_cuda_needs_the_cuda_backend(tiny):
    with pytest.raises(UnsupportedError, match="no CUDA backend"):
        _plan(tiny, "cuda", n_ctx=64)


@pytest.mark.skipif(not _cuda_built(), reason="the CUDA backend is not built")
def test_cuda_scratch_follows_the_kernel_chooser(tmp_path):
    """gemm_wg takes an iq4_xs weight's prefill on sm_90a (choose_matmul.cu), so
    its 128 MiB weight scratch is planned; a q4_1 model's (mmq) needs none with
    f16 KV; the plan needs no GPU (without one it plans for sm_90a; on a GPU
    other than compute capability 9 there is no gemm_wg, and no scratch)."""
    if N.cuda_device_count() > 0:
        pytest.skip("the figures depend on the GPU's architecture; planned here for sm_90a "
                    "only without one")
    def backend(wtype, kv="f16"):
        path = write_tiny_model(tmp_path / f"{wtype.name}.gguf", "llama", wtype, seed=3)
        with N.Model(path, n_threads=1) as m:   # (bound on the CPU: the plan reads the file)
            return _plan(m, "cuda", n_ctx=256, n_ubatch=128, type_k=kv, type_v=kv).backend
    iq4xs, q41 = backend(T.IQ4_XS), backend(T.Q4_1)
    assert iq4xs - q41 >= 128 << 20
    assert backend(T.Q4_1, "q8_0") - q41 >= 128 << 20   # the staged attention decodes q8_0
    assert np.isfinite(q41) and q41 > 32 << 20          # the split-attention workspace
