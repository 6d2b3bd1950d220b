"""A qwen35 model's MTP (nextn) block (native/src/mtp.c) against the numpy
reference (tests/reference_mtp.py) on tiny random models: drafts and their
logits at several positions, after truncation, batch against token by token;
draft_model="mtp" greedy output identical to plain greedy."""
from __future__ import annotations

import numpy as np
import pytest

from pyllamakv import Llama
from pyllamakv.core.native import Context, Model
from pyllamakv.errors import UnsupportedError
from reference_mtp import reference_mtp_draft
from fixtures.tiny_qwen35 import write_tiny_qwen35

N_VOCAB = 320
# f32 weights and KV: plain float arithmetic against the float64 reference
# (measured ~1e-6 relative over the trunk and the block, 2026-12-02)
TOL = 1e-4


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    seed = int(np.random.default_rng().integers(1 << 30))
    return write_tiny_qwen35(tmp_path_factory.mktemp("mtp") / "mtp.gguf", seed=seed, n_nextn=1)


def _ctx(m, **kw):
    args = dict(n_ctx=256, n_batch=256, n_ubatch=256, kv_chunk=32, n_threads=2,
                type_k="f32", type_v="f32", mtp=True)
    args.update(kw)
    return Context(m, **args)


def _check(ctx, path, tokens, token, k=3):
    d, lg = ctx.mtp_draft(token, k, logits=True)
    d_ref, lg_ref = reference_mtp_draft(path, tokens, token, k)
    err = float(np.abs(lg - lg_ref).max() / np.abs(lg_ref).max())
    assert err < TOL, f"MTP logits at {len(tokens)} positions: relative error {err:.2e}"
    # drafts are the arg-max of each step (the reference chains its own)
    assert d.tolist() == np.argmax(lg, axis=1).tolist()
    gap = np.sort(lg_ref, axis=1)[:, -2:]
    if np.all(gap[:, 1] - gap[:, 0] > 1e-3 * np.abs(lg_ref).max()):
        assert d.tolist() == d_ref.tolist()
    return d, lg


def test_mtp_logits_match_reference_at_several_positions(path):
    rng = np.random.default_rng()
    tokens = rng.integers(0, N_VOCAB, 70).tolist()
    with Model(path) as m, _ctx(m, n_ubatch=24) as c:   # micro-batches across KV chunks
        done = 0
        for n in (1, 9, 33, 70):
            c.decode(tokens[done:n])
            done = n
            _check(c, path, tokens[:n], int(rng.integers(N_VOCAB)))
        # a draft leaves the trunk alone: the next decode continues as before
        c.decode([5, 6])
        _check(c, path, tokens + [5, 6], 9, k=2)


def test_mtp_follows_truncation_and_reset(path):
    rng = np.random.default_rng()
    tokens = rng.integers(0, N_VOCAB, 40).tolist()
    with Model(path) as m, _ctx(m, n_ubatch=16) as c:
        c.decode(tokens[:30])
        c.snapshot()                        # keeps the hidden state at 29 with it
        c.decode(tokens[30:])
        c.truncate(30)                      # back to the snapshot
        _check(c, path, tokens[:30], 11)
        c.decode(tokens[30:35])             # the same tokens again past the snapshot
        _check(c, path, tokens[:35], 12)
        other = rng.integers(0, N_VOCAB, 6).tolist()
        c.truncate(30)
        c.decode(other)
        _check(c, path, tokens[:30] + other, 13)
        c.reset()
        c.decode(other)
        _check(c, path, other, 14)


def test_mtp_batch_equals_token_by_token(path):
    rng = np.random.default_rng()
    tokens = rng.integers(0, N_VOCAB, 50).tolist()
    with Model(path) as m:
        with _ctx(m) as a, _ctx(m, n_batch=1, n_ubatch=1) as b:
            a.decode(tokens)
            for t in tokens:
                b.decode([t])
            da, la = a.mtp_draft(3, 4, logits=True)
            db, lb = b.mtp_draft(3, 4, logits=True)
    err = float(np.abs(la - lb).max() / np.abs(la).max())
    assert err < TOL, f"batch vs token by token: relative error {err:.2e}"


def test_mtp_out_of_sync_drafts_nothing_and_errors(path, tmp_path):
    with Model(path) as m:
        with _ctx(m) as c:
            assert c.mtp_draft(3, 2).size == 0          # nothing decoded yet
            c.decode([1, 2, 3])
            blob = c.state_get()
            c.state_set(blob)
            assert c.n_tokens == 3 and c.mtp_draft(3, 2).size == 0   # after a state load
            c.reset()
            c.decode([1, 2, 3])
            assert c.mtp_draft(3, 2).size == 2
            with pytest.raises(ValueError, match="outside the vocabulary"):
                c.mtp_draft(N_VOCAB, 2)
            with pytest.raises(ValueError, match="n_draft"):
                c.mtp_draft(3, 0)
            assert c.mtp_draft(3, 2).size == 2           # still usable
        with _ctx(m, mtp=False) as c, pytest.raises(UnsupportedError, match="mtp"):
            c.decode([1])
            c.mtp_draft(3, 1)
    plain = write_tiny_qwen35(tmp_path / "plain.gguf", seed=3)
    with Model(plain) as m, pytest.raises(UnsupportedError, match="MTP"):
        _ctx(m)


def _greedy(llm, prompt, n):
    out = []
    for t in llm.generate(prompt, temp=0.0):
        out.append(t)
        if len(out) == n:
            return out


def test_draft_model_mtp_greedy_equals_plain_greedy(path):
    rng = np.random.default_rng()
    prompt = rng.integers(3, N_VOCAB, 12).tolist()
    kw = dict(n_ctx=128, n_batch=32, n_threads=2, type_k="f32", type_v="f32")
    with Llama(str(path), **kw) as plain, Llama(str(path), draft_model="mtp", **kw) as spec:
        want = _greedy(plain, prompt, 40)
        got = _greedy(spec, prompt, 40)
        assert got == want
        t = spec.timings
        assert t.verify_passes > 0 and t.drafted_tokens > 0, vars(t)
        assert 0 <= t.accepted_tokens <= t.drafted_tokens
        # again over the cache the first call left (prefix reuse from a snapshot)
        assert _greedy(spec, prompt, 40) == want
        # a continuation of the first answer: the drafter follows the new history
        more = prompt + want[:20]
        assert _greedy(spec, more, 20) == _greedy(plain, more, 20)


def test_hybrid_speculation_rolls_back_partly_kept_drafts(path):
    # a drafter that knows plain greedy's answer and spoils every third guess:
    # drafts kept, rejected after one or two kept (the snapshot-and-replay
    # rollback of a hybrid's recurrent state, sequence.py), all kept
    rng = np.random.default_rng()
    prompt = rng.integers(3, N_VOCAB, 10).tolist()
    kw = dict(n_ctx=128, n_batch=32, n_threads=2, type_k="f32", type_v="f32")
    with Llama(str(path), **kw) as plain:
        want = _greedy(plain, prompt, 45)
    calls = []

    def oracle(ids, **_):
        done = len(ids) - len(prompt)        # answer tokens in ids
        calls.append(done)
        guess = list(want[done:done + 4])
        if len(calls) % 3 == 0 and len(guess) > 2:
            guess[len(calls) % 2 + 1] = (guess[len(calls) % 2 + 1] + 1) % N_VOCAB
        return np.asarray(guess, np.intc)

    with Llama(str(path), draft_model=oracle, **kw) as spec:
        assert _greedy(spec, prompt, 45) == want
        t = spec.timings
        assert 0 < t.accepted_tokens < t.drafted_tokens, vars(t)


def test_gpu_memory_budget_counts_the_mtp_block(path):
    from pyllamakv.memory.budget import granule, plan_budget
    from pyllamakv.config import LlamaConfig
    from pyllamakv.memory.plan import kv_row_bytes
    with Model(path) as m:
        hp, tensors = m.hparams, m.file.tensors
    cfg = LlamaConfig(256, n_batch=64, n_ubatch=64, type_k="q8_0", type_v="f16",
                      gpu_memory_mib=512)
    plain, _ = plan_budget(cfg, hp, tensors, 256, "cpu", wide_logits=True)
    mtp, _ = plan_budget(cfg, hp, tensors, 256, "cpu", wide_logits=True, mtp=True)
    kv = granule(kv_row_bytes(hp, "q8_0") * 256) + granule(kv_row_bytes(hp, "f16") * 256)
    # the core's plan: the block's own KV (one layer, all resident) and its
    # buffers, beside the context's (budget.py counts them with the workspace)
    assert mtp.recurrent == plain.recurrent
    assert mtp.workspace - plain.workspace > kv
    with Llama(str(path), n_ctx=256, n_batch=64, n_ubatch=64, gpu_memory_mib=512, type_k="q8_0",
               draft_model="mtp") as llm:
        assert llm.memory.recurrent == mtp.recurrent
