"""gemma3 on the CPU backend: KV streaming on the emulated device with
sliding-window layers (the local layers keep a ring of window - 1 + n_batch
rows beside the pool, only the global ones are planned and streamed) is
bit-identical to the all-resident run for any pool; statistics say which
layers stream; truncation within the ring, and its refusal before it; state
save / load, sequences sharing one pool."""
from __future__ import annotations

import numpy as np
import pytest

from pyllamakv.core.native import Context, Model, row_bytes
from pyllamakv.gguf.arch_gemma3 import swa_layers, swa_lines
from fixtures.tiny_gemma3 import write_tiny_gemma3
from gguf import GGMLQuantizationType as T

CHUNK = 16
N_LAYER, PATTERN, WINDOW = 6, 3, 40     # layers 2 and 5 global, the others local


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = write_tiny_gemma3(tmp_path_factory.mktemp("g3") / "g3.gguf", T.Q8_0,
                             n_layer=N_LAYER, pattern=PATTERN, window=WINDOW)
    with Model(path) as m:
        yield m


def _chunk_bytes(m, chunk, kv="f16"):
    hp = m.hparams
    return chunk * 2 * row_bytes(kv, hp["n_head_kv"] * hp["head_dim"])


N_BATCH = 128
RING = WINDOW - 1 + N_BATCH


def _script(m, tokens, pool, ubatch, n_ctx=640):
    """Prefill in n_batch pieces, decodes, a truncation as far back as the ring
    allows, a prefill and decodes after it, a reset, a prefill: every logit
    row, and kv_stats() before the reset."""
    c = Context(m, n_ctx=n_ctx, n_batch=N_BATCH, n_ubatch=ubatch, kv_chunk=CHUNK,
                kv_pool_bytes=pool, n_threads=2, logits_all=True)
    out, n = [], len(tokens)
    for i in range(0, n - 10, N_BATCH):
        c.decode(tokens[i:min(i + N_BATCH, n - 10)])
        out.append(c.logits())
    for t in tokens[n - 10:]:
        c.decode([t])
        out.append(c.logits())
    back = n - (RING - WINDOW + 1)           # the ring's floor: the furthest truncation
    assert c.restore_point(back) == back and c.restore_point(n) == n
    c.truncate(back)
    c.decode(tokens[:50])
    out.append(c.logits())
    for t in tokens[50:53]:
        c.decode([t])
        out.append(c.logits())
    stats = c.kv_stats()
    c.reset()
    c.decode(tokens[:40])
    out.append(c.logits())
    return np.concatenate(out), stats


def test_hparams(tiny):
    hp = tiny.hparams
    assert (hp["swa_window"], hp["swa_pattern"], hp["rope_freq_base_swa"]) == (WINDOW, PATTERN, 1e4)
    assert swa_layers(hp) == [True, True, False, True, True, False]
    assert hp["attn_scale"] == pytest.approx(hp["head_dim"] ** -0.5)
    assert "4 of 6 layers local (window 40" in swa_lines(hp)[0]


@pytest.mark.parametrize("ubatch", [5, 64])
def test_any_pool_is_bit_identical(tiny, ubatch):
    rng = np.random.default_rng()
    tokens = rng.integers(0, 320, 400).tolist()
    ref, ref_stats = _script(tiny, tokens, None, ubatch)
    assert ref_stats["streaming"] == 0 and ref_stats["local_layers"] == 0
    cb = _chunk_bytes(tiny, CHUNK)
    n_global = N_LAYER // PATTERN
    full = n_global * 40 * cb
    for pool in [2 * cb, 9 * cb, full // 2, full + cb]:
        got, stats = _script(tiny, tokens, pool, ubatch)
        assert np.array_equal(got, ref), f"pool {pool}: max diff {np.abs(got - ref).max()}"
        assert stats["streaming"] == 1 and stats["pool_bytes"] == pool
        # only the global layers are planned; the local ones are resident beside the pool
        assert stats["n_layer"] == n_global and len(stats["resident_chunks"]) == n_global
        assert stats["local_layers"] == N_LAYER - n_global
        assert stats["local_bytes"] == (N_LAYER - n_global) * RING * cb // CHUNK
        if pool == 2 * cb:
            assert stats["bytes_streamed"] > 0


def test_state_and_sequences_with_a_pool(tiny):
    rng = np.random.default_rng()
    a, b = rng.integers(0, 320, 150).tolist(), rng.integers(0, 320, 120).tolist()
    cb = _chunk_bytes(tiny, CHUNK)
    kw = dict(n_ctx=256, n_batch=256, n_ubatch=32, kv_chunk=CHUNK, n_threads=2)
    with Context(tiny, **kw) as c:
        c.decode(a)
        blob = c.state_get()
        c.decode(b[:1])
        want = c.logits()
    with Context(tiny, kv_pool_bytes=3 * cb, **kw) as s:   # streamed, state loaded
        s.state_set(blob)
        s.decode(b[:1])
        assert np.array_equal(s.logits(), want)
    # two sequences sharing a pool: each as if alone
    with Context(tiny, **kw) as c:
        c.decode(b)
        alone = c.logits()
    with Context(tiny, kv_pool_bytes=8 * cb, n_seq_max=2, **kw) as s:
        s.decode_batch(a[:100], [0] * 100)
        s.decode_batch(b, [1] * len(b))
        assert np.array_equal(s.logits(), alone)
        s.seq_copy(1, 0)
        s.decode_batch(a[:3], [0] * 3)
        s.decode_batch(a[:3], [1] * 3)
        r = s.logits()
        assert s.seq_kv_stats(0)["local_layers"] == N_LAYER - N_LAYER // PATTERN
    with Context(tiny, **kw) as c:
        c.decode(b + a[:3])
        assert np.array_equal(c.logits(), r)


def test_ring_refuses_what_it_no_longer_holds(tiny):
    rng = np.random.default_rng()
    tokens = rng.integers(0, 320, 300).tolist()
    cb = _chunk_bytes(tiny, CHUNK)
    kw = dict(n_ctx=640, n_batch=N_BATCH, n_ubatch=32, kv_chunk=CHUNK, n_threads=2)
    with Context(tiny, kv_pool_bytes=4 * cb, **kw) as c:
        for i in range(0, 300, N_BATCH):
            c.decode(tokens[i:i + N_BATCH])
        floor = 300 - (RING - WINDOW + 1)
        assert c.restore_point(floor - 1) == 0 and c.restore_point(floor) == floor
        with pytest.raises(Exception, match="sliding-window layers keep a ring of 167 rows"):
            c.truncate(floor - 1)
        assert c.n_tokens == 300           # nothing changed
        c.truncate(0)
        c.decode(tokens[:10])
        with Context(tiny, **kw) as r:     # without a pool every position can be returned to
            r.decode(tokens[:10])
            assert np.array_equal(c.logits(), r.logits())
            for i in range(10, 300, N_BATCH):
                r.decode(tokens[i:i + N_BATCH])
            assert r.restore_point(5) == 5


def test_refusals_name_the_problem(tmp_path):
    from gguf import GGUFReader
    from pyllamakv.gguf.reader import GGUFError
    from fixtures.tiny_gemma3 import Gemma3Config, gguf_tensors, hf_weights, write_gguf
    cfg = Gemma3Config(n_layer=2)
    tensors = gguf_tensors(cfg, hf_weights(cfg, np.random.default_rng()))
    path = write_gguf(tmp_path / "g.gguf", cfg, tensors)
    assert GGUFReader(str(path)).fields["general.architecture"].contents() == "gemma3"
    del tensors["blk.1.post_ffw_norm.weight"]
    with pytest.raises(Exception, match="missing tensor 'blk.1.post_ffw_norm.weight'"):
        Model(write_gguf(tmp_path / "miss.gguf", cfg, tensors))
    # still-unsupported architectures are named beside the supported list
    moe = tmp_path / "moe.gguf"
    moe.write_bytes(path.read_bytes().replace(b"gemma3", b"qwen3m", 1))
    with pytest.raises(GGUFError, match=r"unsupported architecture 'qwen3m'; supported: .*gemma3"):
        Model(moe)
