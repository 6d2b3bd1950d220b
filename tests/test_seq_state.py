"""Per-sequence state and statistics: the state of one sequence loads into
another sequence (of the same context or of another of the same model and
geometry) and decodes on with the same bits; a bad blob raises and changes
nothing; kv_stats of one sequence counts its tokens and chunks."""
from __future__ import annotations

import numpy as np
import pytest

from pyllamakv import Llama, errors
from pyllamakv.core.native import Context, row_bytes
from fixtures.tiny_models import tiny_model_fixture
from _smollm2 import model_path, require_model_path

CHUNK, N_CTX = 16, 96


tiny = tiny_model_fixture("llama", n_layer=2, n_threads=2)


def _min_pool(m):
    hp = m.hparams
    return 2 * CHUNK * 2 * row_bytes("f16", hp["n_head_kv"] * hp["head_dim"])


@pytest.mark.parametrize("pooled", [False, True])
def test_core_seq_state_moves_between_sequences(tiny, pooled):
    rng = np.random.default_rng()
    a = rng.integers(0, tiny.n_vocab, 40).tolist()     # over two chunks: streamed with a pool
    b = rng.integers(0, tiny.n_vocab, 7).tolist()
    nxt = rng.integers(0, tiny.n_vocab, 3).tolist()
    pool = 3 * _min_pool(tiny) if pooled else None
    kw = dict(n_ctx=N_CTX, n_batch=64, n_ubatch=16, kv_chunk=CHUNK, n_threads=2,
              kv_pool_bytes=pool)
    with Context(tiny, n_seq_max=3, **kw) as c:
        c.decode_batch(b + a, [0] * len(b) + [1] * len(a))
        blob = c.seq_state_get(1)
        assert blob != c.seq_state_get(0)
        c.seq_state_set(2, blob)
        assert [c.seq_n_tokens(s) for s in range(3)] == [len(b), len(a), len(a)]
        assert c.seq_state_get(2) == blob
        st = c.seq_kv_stats(2)
        assert st["n_tokens"] == len(a) and len(st["streamed_chunks"]) == st["n_layer"]
        if pooled:
            assert st["streaming"] == 1 and sum(st["streamed_chunks"]) > 0
        c.decode_batch(nxt + nxt, [1] * 3 + [2] * 3, [True] * 6)
        rows = c.logits()
        assert np.array_equal(rows[:3], rows[3:]), "seq 2 loaded from seq 1 decodes other bits"
        # into sequence 0 of a one-sequence context of the same geometry
        with Context(tiny, **kw) as one:
            one.state_set(blob)
            one.decode(nxt, n_logits=3)
            assert np.array_equal(one.logits(), rows[:3])
        # a bad blob: refused, and sequence 2 is as it was
        before = c.seq_state_get(2)
        for bad in (blob[:-8], blob[:10], b"\0" * len(blob)):
            with pytest.raises(errors.LlamaKVError):
                c.seq_state_set(2, bad)
            assert c.seq_state_get(2) == before
        with pytest.raises(errors.InvalidArgumentError, match="sequence id 3.*n_seq_max"):
            c.seq_state_get(3)
        with pytest.raises(errors.InvalidArgumentError, match="seq"):
            c.seq_state_set(-1, blob)
        with pytest.raises(errors.InvalidArgumentError, match="sequence id 5.*n_seq_max"):
            c.seq_kv_stats(5)


@pytest.fixture(scope="module")
def smol():
    path = require_model_path()
    with Llama(path, n_ctx=128, n_threads=2, n_seq_max=3) as multi, \
            Llama(path, n_ctx=128, n_threads=2) as one:
        yield multi, one


def test_llama_seq_state_round_trip(smol):
    multi, one = smol
    prompts = ["The capital of France is", "1, 2, 3,", "Water boils at"]
    multi.create_completion(prompts, max_tokens=6, temperature=0)
    s1 = multi.save_state(seq_id=1)
    assert s1.n_tokens == multi.kv_stats(seq_id=1)["n_tokens"] > 0
    assert list(s1.input_ids[:4]) == one.tokenize(prompts[1].encode(), special=True)[:4]
    # the blob of sequence 1 is what sequence 0 of another Llama saves after loading it
    one.load_state(s1)
    assert one.save_state().llama_state == s1.llama_state
    multi.load_state(s1, seq_id=2)
    assert multi.save_state(seq_id=2).llama_state == s1.llama_state
    assert multi.kv_stats(seq_id=2)["n_tokens"] == s1.n_tokens
    # and the other way round: sequence 0's state into sequence 1
    s0 = multi.save_state()
    multi.load_state(s0, seq_id=1)
    assert multi.save_state(seq_id=1).llama_state == s0.llama_state
    assert np.array_equal(multi.save_state(seq_id=1).scores, s0.scores)


def test_llama_bad_seq_state_changes_nothing(smol):
    multi, one = smol
    multi.create_completion(["Once upon a time", "Hello", "A B C"], max_tokens=4,
                            temperature=0)
    good = multi.save_state(seq_id=2)
    before = multi.save_state(seq_id=1).llama_state
    damaged = bytearray(good.llama_state)
    damaged[len(damaged) // 2] ^= 0xFF
    bad = [type(good)(good.input_ids, good.scores, good.n_tokens, bytes(damaged), good.n_ctx),
           type(good)(good.input_ids[:-1], good.scores, good.n_tokens - 1, good.llama_state,
                      good.n_ctx),
           "not a state"]
    for state in bad:
        with pytest.raises(errors.StateError):
            multi.load_state(state, seq_id=1)
        assert multi.save_state(seq_id=1).llama_state == before
    with Llama(model_path(), n_ctx=64, n_threads=2) as other:   # another geometry
        with pytest.raises(errors.StateError, match="n_ctx"):
            other.load_state(good)
    for seq in (3, -1):
        with pytest.raises(errors.ParameterError, match="n_seq_max"):
            multi.save_state(seq_id=seq)
        with pytest.raises(errors.ParameterError, match="n_seq_max"):
            multi.kv_stats(seq_id=seq)
    with pytest.raises(errors.ParameterError, match="n_seq_max = 1"):
        one.load_state(good, seq_id=1)
    multi.reset()
    assert [multi.kv_stats(seq_id=s)["n_tokens"] for s in range(3)] == [0, 0, 0]
