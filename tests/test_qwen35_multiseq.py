"""A hybrid model (tiny qwen35) with several sequences in one context (CPU): each
sequence has its own recurrent state, so its logits in a shared step are those
it gets alone (its tokens falling into micro-batches as they do alone); its
snapshots, truncation, copy and state are its own; a Llama(n_seq_max=3) prompt
list gives the texts of one call per prompt."""
from __future__ import annotations

import numpy as np
import pytest

from pyllamakv import Llama, errors
from pyllamakv.core.native import Context, Model
from fixtures.tiny_qwen35 import write_tiny_qwen35

KW = dict(n_ctx=96, n_batch=64, n_ubatch=8, n_threads=2)


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return str(write_tiny_qwen35(tmp_path_factory.mktemp("q35ms") / "tiny.gguf"))


def _alone(m, parts):
    """Logits rows of each decode call of parts on a one-sequence context."""
    with Context(m, **KW) as one:
        out = []
        for p in parts:
            one.decode(p)
            out.append(one.logits()[-1])
        return out


def test_sequences_keep_their_own_state(path):
    rng = np.random.default_rng()
    with Model(path, "cpu", 2) as m:
        a, b = (rng.integers(0, m.n_vocab, int(rng.integers(2, 30))).tolist() for _ in "ab")
        ta, tb = rng.integers(0, m.n_vocab, (2, 3)).tolist()
        with Context(m, n_seq_max=3, **KW) as c:
            c.decode_batch(a, [0] * len(a))            # prompts alone, as the scheduler runs them
            c.decode_batch(b, [2] * len(b))
            c.seq_snapshot(2)
            rows = []
            for x, y in zip(ta, tb):                   # decode steps shared
                c.decode_batch([x, y], [0, 2])
                rows.append(c.logits())
            want_a = _alone(m, [a] + [[x] for x in ta])
            want_b = _alone(m, [b] + [[y] for y in tb])
            for i, r in enumerate(rows):
                assert np.array_equal(r[0], want_a[i + 1]) and np.array_equal(r[1], want_b[i + 1])
            # sequence 2 goes back to its snapshot; sequence 0 is untouched
            assert c.seq_restore_point(2, len(b) + 1) == len(b)
            assert c.seq_restore_point(0, len(a) + 1) == 0      # no snapshot of its own
            c.seq_truncate(2, len(b))
            c.decode_batch([tb[0]], [2])
            assert np.array_equal(c.logits()[0], want_b[1])
            with pytest.raises(errors.InvalidArgumentError):   # not a point it can return to
                c.seq_truncate(0, 1)
            assert c.seq_n_tokens(0) == len(a) + 3
            # a state saved from sequence 2 loads into sequence 1 and goes on the same
            blob = c.seq_state_get(2)
            c.seq_state_set(1, blob)
            c.decode_batch([tb[1], tb[1]], [1, 2])
            r = c.logits()
            assert np.array_equal(r[0], r[1]) and np.array_equal(r[1], want_b[2])
            # copy: the whole sequence (its state with it) or nothing
            c.seq_copy(0, 1)
            c.decode_batch([ta[0]], [1])
            with pytest.raises(errors.UnsupportedError):
                c.seq_copy(0, 2, 3)


def test_prompt_list_equals_one_call_per_prompt(path):
    rng = np.random.default_rng()
    with Llama(path, **KW) as one:
        prompts = [rng.integers(0, one.n_vocab(), int(rng.integers(2, 20))).tolist()
                   for _ in range(4)]
        want = [one.create_completion(p, max_tokens=6, temperature=0)["choices"][0]["text"]
                for p in prompts]
    with Llama(path, n_seq_max=3, **KW) as llm:
        out = llm.create_completion(prompts, max_tokens=6, temperature=0)
        assert [c["text"] for c in out["choices"]] == want
        assert llm.engine.scheduler.multi_steps > 0
        out = llm.create_completion(prompts[::-1], max_tokens=6, temperature=0)   # prefixes kept
        assert [c["text"] for c in out["choices"]] == want[::-1]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_scripts_equal_one_context_per_sequence(path, seed):
    """Random scripts (tests/hybrid_script.py: steps of several sequences with
    prompts beside single tokens, snapshots and truncation to them, whole
    copies and state blobs, resets) on one context of 3 sequences give each
    sequence bit for bit the logits of its own one-sequence context, and the
    same restore points. Each sequence's tokens of a step are one run of one
    micro-batch (n_ubatch = n_batch), as they are alone."""
    from hybrid_script import make_script, run_alone, run_shared
    from multiseq_script import compare
    rng = np.random.default_rng(seed * 7919 + int(np.random.default_rng().integers(1 << 20)))
    n_seq, kw = 3, dict(n_ctx=160, n_batch=80, n_ubatch=80, n_threads=2, kv_chunk=32)
    with Model(path, "cpu", 2) as m:
        events = make_script(rng, n_seq, m.n_vocab, kw["n_ctx"], kw["n_batch"], 40, long=70)
        with Context(m, n_seq_max=n_seq, **kw) as c:
            shared, p_shared = run_shared(c, events, n_seq)
        ones = [Context(m, **kw) for _ in range(n_seq)]
        try:
            alone, p_alone = run_alone(ones, events, n_seq)
        finally:
            for o in ones:
                o.close()
    assert p_shared == p_alone
    compare(shared, alone, f"CPU hybrid, seed {seed}")
