"""Several sequences in one context (CPU backend): each sequence's logits are
bit-identical to that sequence decoded alone, whatever runs beside it,
whatever the pool, with sequences joining and leaving between steps and
truncate / copy / reset in the middle; the planner's split of the pool;
bad sequence arguments."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from pyllamakv import errors
from pyllamakv.core.native import Context, Model, row_bytes
from pyllamakv.core.native_seqs import pool_shares
from pyllamakv.engine.scheduler import Scheduler
from multiseq_script import compare, context_factory, make_script, run_alone, run_batched
from fixtures.tiny_models import write_tiny_model
from _smollm2 import require_model_path

CHUNK, N_CTX, N_BATCH = 16, 160, 64


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def tiny(request, tmp_path_factory):
    path = write_tiny_model(tmp_path_factory.mktemp("ms") / "tiny.gguf", request.param, T.Q8_0,
                            n_layer=2)
    with Model(path, n_threads=2) as m:
        yield m


def _seq_min_pool(m, chunk=CHUNK):
    hp = m.hparams
    return 2 * chunk * 2 * row_bytes("f16", hp["n_head_kv"] * hp["head_dim"])


def _kw(ubatch, pool):
    return dict(n_ctx=N_CTX, n_batch=N_BATCH, n_ubatch=ubatch, kv_chunk=CHUNK,
                kv_pool_bytes=pool, n_threads=2)


@pytest.mark.parametrize("seed", [1, 2])
def test_batched_equals_alone_any_pool(tiny, seed):
    rng = np.random.default_rng(seed * 1000 + int(np.random.default_rng().integers(1000)))
    n_seq = 3
    events = make_script(rng, n_seq, tiny.n_vocab, N_CTX, N_BATCH, 40)
    assert sum(e[0] == "copy" for e in events) + sum(e[0] == "truncate" for e in events) > 0
    ubatch = 7   # micro-batches cut across sequences' runs
    alone = run_alone(context_factory(tiny, **_kw(ubatch, None)), events, n_seq, N_BATCH)
    mn = _seq_min_pool(tiny)
    hp = tiny.hparams
    full = 2 * N_CTX * 2 * row_bytes("f16", hp["n_head_kv"] * hp["head_dim"])  # 2 layers
    for pool in (None, n_seq * mn, n_seq * mn * 3 + 4096, full, n_seq * full):
        batched = run_batched(context_factory(tiny, **_kw(ubatch, pool)), events, n_seq)
        compare(batched, alone, f"pool {pool}")


def test_alone_pool_sizes_and_ubatch(tiny):
    """A sequence alone in a many-sequence context equals a one-sequence context."""
    rng = np.random.default_rng()
    toks = rng.integers(0, tiny.n_vocab, 50).tolist()
    ref = Context(tiny, **_kw(16, None))
    ref.decode(toks[:40], n_logits=40)
    a = ref.logits()
    for pool in (None, 4 * _seq_min_pool(tiny)):
        with Context(tiny, n_seq_max=4, **_kw(16, pool)) as c:
            c.decode_batch(toks[:40], [2] * 40, [True] * 40)
            assert np.array_equal(c.logits(), a)
            assert c.seq_n_tokens(2) == 40 and c.seq_n_tokens(0) == 0 and c.n_tokens == 0


def test_weights_read_once_rows_per_token(tiny):
    """Default want_logits: the last token of each sequence's run, in token order."""
    rng = np.random.default_rng()
    a, b = rng.integers(0, tiny.n_vocab, 9).tolist(), rng.integers(0, tiny.n_vocab, 4).tolist()
    with Context(tiny, n_seq_max=2, **_kw(64, None)) as c:
        assert c.decode_batch(b + a, [1] * 4 + [0] * 9) == 2
        rows = c.logits()
    with Context(tiny, **_kw(64, None)) as one:
        one.decode(b)
        rb = one.logits()
        one.reset()
        one.decode(a)
        ra = one.logits()
    assert np.array_equal(rows[0], rb[0]) and np.array_equal(rows[1], ra[0])


def test_scheduler_steps(tiny):
    """Work queued for two sequences runs in one step (a prompt beside a chunked
    one), each sequence's rows those it gets alone; a failing step leaves both
    where they were."""
    rng = np.random.default_rng()
    p0 = rng.integers(0, tiny.n_vocab, 70).tolist()   # more than n_batch: two chunks
    p1 = rng.integers(0, tiny.n_vocab, 5).tolist()
    with Context(tiny, n_seq_max=2, **_kw(8, None)) as c:
        s = Scheduler(c, N_BATCH)
        w0, w1 = s.submit(0, p0, 3, 0), s.submit(1, p1, 0, 0)
        rows1 = s.wait(w1)          # runs the first step: 64 of p0, then p1 beside p0's rest
        rows0 = s.wait(w0)
        assert c.seq_n_tokens(0) == 70 and c.seq_n_tokens(1) == 5
        assert s.steps == 2 and s.step_tokens == 75
        assert rows0.shape == (3, tiny.n_vocab) and rows1.shape == (1, tiny.n_vocab)
        with pytest.raises(errors.InvalidArgumentError):   # the core refuses a bad id
            s.run(1, [tiny.n_vocab], 0, 5)     # the step fails as one
        assert c.seq_n_tokens(1) == 5
    with Context(tiny, **_kw(8, None)) as one:
        one.decode(p0[:64])
        one.decode(p0[64:], n_logits=3)
        r0 = one.logits()
        one.reset()
        one.decode(p1)
        r1 = one.logits()
    assert np.array_equal(rows0, r0) and np.array_equal(rows1, r1)


def test_copy_shares_prefix_without_recompute(tiny):
    rng = np.random.default_rng()
    prefix = rng.integers(0, tiny.n_vocab, 37).tolist()
    tail = rng.integers(0, tiny.n_vocab, 3).tolist()
    for pool in (None, 3 * _seq_min_pool(tiny)):
        with Context(tiny, n_seq_max=3, **_kw(16, pool)) as c:
            c.decode_batch(prefix, [0] * len(prefix))
            c.seq_copy(0, 1)
            c.seq_copy(0, 2, 20)
            assert [c.seq_n_tokens(s) for s in range(3)] == [37, 37, 20]
            c.decode_batch(tail + tail, [1] * 3 + [2] * 3, [True] * 6)
            got = c.logits()
        with Context(tiny, **_kw(16, None)) as one:
            one.decode(prefix + tail, n_logits=3)
            w1 = one.logits()
            one.reset()
            one.decode(prefix[:20] + tail, n_logits=3)
            w2 = one.logits()
        assert np.array_equal(got[:3], w1) and np.array_equal(got[3:], w2)


def test_default_model_batched_equals_alone():
    path = require_model_path()
    rng = np.random.default_rng()
    with Model(path, n_threads=2) as m:
        n_seq, n_ctx, n_batch = 3, 96, 48
        events = make_script(rng, n_seq, m.n_vocab, n_ctx, n_batch, 9)
        kw = dict(n_ctx=n_ctx, n_batch=n_batch, n_ubatch=16, kv_chunk=16, n_threads=2)
        alone = run_alone(context_factory(m, **kw), events, n_seq, n_batch)
        mn = _seq_min_pool(m, 16)
        for pool in (None, n_seq * mn):
            batched = run_batched(context_factory(m, kv_pool_bytes=pool, **kw), events, n_seq)
            compare(batched, alone, f"SmolLM2, pool {pool}")


# ------------------------------------------------------------------ planner

def test_pool_shares_policy():
    rng = np.random.default_rng()
    for _ in range(200):
        n = int(rng.integers(1, 12))
        active = (rng.random(n) < 0.6).tolist()
        pool = int(rng.integers(0, 1 << 30))
        shares = pool_shares(pool, active)
        assert pool_shares(pool, active) == shares   # pure
        k = sum(active)
        want = pool // k // 256 * 256 if k else 0
        pos = 0
        for a, (off, size) in zip(active, shares):
            if not a:
                assert (off, size) == (0, 0)
                continue
            assert size == want and off == pos and off % 256 == 0 and off + size <= pool
            pos += size
    assert pool_shares(1 << 20, [True]) == [(0, 1 << 20)]   # alone: the whole pool
    # only the active set matters, not which sequences are inactive around them
    assert pool_shares(9000, [True, False, True])[2] == pool_shares(9000, [True, True])[1]
    with pytest.raises(errors.PoolTooSmallError):
        pool_shares(1000, [True] * 4, min_share=300)


def test_pool_must_hold_every_sequence(tiny):
    mn = _seq_min_pool(tiny)
    with pytest.raises(errors.PoolTooSmallError, match="split among 4 sequences"):
        Context(tiny, n_seq_max=4, **_kw(16, 4 * mn - 2048))
    Context(tiny, n_seq_max=4, **_kw(16, 4 * mn + 4 * 256)).close()


# ------------------------------------------------------------------ bad input

def test_bad_sequence_arguments(tiny):
    rng = np.random.default_rng()
    toks = rng.integers(0, tiny.n_vocab, 6).tolist()
    with Context(tiny, n_seq_max=2, **_kw(16, None)) as c:
        c.decode_batch(toks[:3], [1] * 3)
        ref = c.logits()
        for seqs, msg in (([0, 1, 0, 0, 0, 0], "not contiguous"), ([0, 0, 0, 2, 2, 2], "outside"),
                          ([-1] * 6, "outside")):
            with pytest.raises(errors.InvalidArgumentError, match=msg):
                c.decode_batch(toks, seqs)
        with pytest.raises(errors.ParameterError, match="entries"):
            c.decode_batch(toks, [0] * 5)
        with pytest.raises(errors.InvalidArgumentError, match="vocabulary"):
            c.decode_batch([tiny.n_vocab] + toks[1:], [0] * 6)
        with pytest.raises(errors.InvalidArgumentError, match="holds 3"):
            c.seq_truncate(1, 4)
        with pytest.raises(errors.InvalidArgumentError, match="both sequence 1"):
            c.seq_copy(1, 1)
        with pytest.raises(errors.InvalidArgumentError, match="holds 3"):
            c.seq_copy(1, 0, 9)
        with pytest.raises(errors.ParameterError):
            c.seq_n_tokens(2)
        # nothing changed: the cache goes on as before
        assert [c.seq_n_tokens(0), c.seq_n_tokens(1)] == [0, 3]
        c.seq_truncate(1, 2)
        c.decode_batch(toks[2:3], [1])
        assert np.array_equal(c.logits(), ref[-1:])
    with Context(tiny, n_seq_max=2, n_ctx=8, n_batch=8, n_threads=2) as small:
        small.decode_batch(toks[:5], [1] * 5)
        with pytest.raises(errors.ContextFullError, match="sequence 1"):
            small.decode_batch(toks[:2] + toks[:4], [0] * 2 + [1] * 4)
        assert [small.seq_n_tokens(0), small.seq_n_tokens(1)] == [0, 5]   # all or nothing


def test_hybrid_holds_several_sequences_on_the_cpu(tmp_path):
    """(Their behaviour: tests/test_qwen35_multiseq.py; on CUDA: tests/test_cuda_qwen35_multiseq.py.)"""
    from fixtures.tiny_qwen35 import write_tiny_qwen35
    with Model(write_tiny_qwen35(tmp_path / "q35.gguf")) as m:
        with Context(m, n_ctx=64, n_seq_max=2) as c:
            assert c.recurrent_bytes > 0 and c.seq_n_tokens(1) == 0


def test_one_pool_shared_by_the_active_sequences(tiny):
    """A sequence alone has the whole pool; its share halves when another joins and
    comes back when that one leaves (kv/plan.h's policy), logits unchanged."""
    rng = np.random.default_rng()
    pool = 3 * 4096 * 8 + 512 * 7
    toks = rng.integers(0, tiny.n_vocab, 40).tolist()
    with Context(tiny, n_seq_max=3, **_kw(16, pool)) as c:
        c.decode_batch(toks, [0] * 40)
        assert c.seq_kv_stats(0)["pool_bytes"] == pool // 256 * 256
        c.decode_batch(toks[:30] + toks[:1], [1] * 30 + [0])
        got = c.logits()
        half = pool // 2 // 256 * 256
        assert c.seq_kv_stats(0)["pool_bytes"] == half == c.seq_kv_stats(1)["pool_bytes"]
        c.seq_reset(1)
        c.decode_batch(toks[1:2], [0])
        assert c.seq_kv_stats(0)["pool_bytes"] == pool // 256 * 256
        last = c.logits()
    with Context(tiny, **_kw(16, None)) as one:
        one.decode(toks + toks[:2], n_logits=2)
        ref = one.logits()
        one.reset()
        one.decode(toks[:30])
        ref1 = one.logits()
    assert np.array_equal(got[0], ref1[0]) and np.array_equal(got[1], ref[0])
    assert np.array_equal(last[0], ref[1])
