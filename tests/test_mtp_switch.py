"""The MTP block's switch (lkv_context_set_mtp, native/src/mtp.h) on tiny random
qwen35 models with an MTP block (tests/fixtures/tiny_qwen35.py, as test_mtp.py):
switched off it computes nothing; switched on behind, the restore point is
one where it is in sync, and after truncating there and decoding the rest
again its drafts are bit for bit those of a context that had it on all along;
a Llama runs it only for generations that draft with it, and greedy output
with speculation switched on mid-stream is plain greedy output. The
bit-for-bit cases also run on CUDA where there is a device (marked gpu)."""
from __future__ import annotations

import numpy as np
import pytest

from pyllamakv import Llama
from pyllamakv.core.native import Context, Model, cuda_device_count
from pyllamakv.errors import UnsupportedError
from test_mtp import _greedy
from fixtures.tiny_qwen35 import write_tiny_qwen35

N_VOCAB = 320
DEVICES = ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(cuda_device_count() == 0, reason="no CUDA device")])]


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    seed = int(np.random.default_rng().integers(1 << 30))
    return write_tiny_qwen35(tmp_path_factory.mktemp("mtp-switch") / "mtp.gguf", seed=seed,
                             n_nextn=1)


def _ctx(m, **kw):
    args = dict(n_ctx=160, n_batch=64, n_ubatch=16, kv_chunk=32, n_threads=2,
                type_k="f32", type_v="f32", mtp=True)
    args.update(kw)
    return Context(m, **args)


def _calls(rng, n_prompt, n_more):
    """A random prompt in random pieces, then single tokens: the decode calls."""
    toks = rng.integers(0, N_VOCAB, n_prompt + n_more).tolist()
    cuts = sorted(set(rng.integers(1, n_prompt, 2).tolist())) + [n_prompt]
    calls, done = [], 0
    for c in cuts:
        calls.append(toks[done:c])
        done = c
    return calls + [[t] for t in toks[n_prompt:]]


def _decode(ctx, calls):
    for c in calls:
        ctx.decode(c)


def _replay(ctx, calls, frm):
    """Decode what calls hold from position frm on, cut as the calls are."""
    pos = 0
    for c in calls:
        lo = max(frm - pos, 0)
        if lo < len(c):
            ctx.decode(c[lo:])
        pos += len(c)


def test_off_computes_nothing_and_refuses_drafts(path):
    rng = np.random.default_rng()
    calls = _calls(rng, int(rng.integers(8, 30)), 5)
    n = sum(map(len, calls))
    with Model(path) as m, _ctx(m) as on, _ctx(m) as off:
        off.set_mtp(False)
        assert not off.mtp_on and on.mtp_on
        _decode(on, calls)
        _decode(off, calls)
        s_on, s_off = on.mtp_stats(), off.mtp_stats()
        assert s_on["rows_computed"] == n - 1 and s_on["n_rows"] == n - 1 and s_on["in_sync"]
        assert s_off["rows_computed"] == 0 and s_off["n_rows"] == 0 and not s_off["in_sync"]
        # the trunk alone: the same logits either way
        assert np.array_equal(on.logits(), off.logits())
        with pytest.raises(UnsupportedError, match="switched off"):
            off.mtp_draft(3, 2)
        k = int(rng.integers(1, 5))
        assert on.mtp_draft(3, k).size == k
        assert on.mtp_stats()["draft_steps"] == k and off.mtp_stats()["draft_steps"] == 0
        # switched on behind: nothing drafted, restore point 0 (never on)
        off.set_mtp(True)
        assert off.mtp_draft(3, 2).size == 0 and not off.mtp_stats()["in_sync"]
        assert off.restore_point(n) == 0
    with Model(path) as m, _ctx(m, mtp=False) as plain:
        plain.set_mtp(False)                     # a no-op without the block
        with pytest.raises(UnsupportedError, match="mtp = 1"):
            plain.set_mtp(True)


@pytest.mark.parametrize("device", DEVICES)
def test_switched_on_drafts_equal_always_on_bit_for_bit(path, device):
    rng = np.random.default_rng()
    calls = _calls(rng, int(rng.integers(10, 40)), int(rng.integers(3, 9)))
    n = sum(map(len, calls))
    token, k = int(rng.integers(N_VOCAB)), int(rng.integers(1, 6))
    with Model(path, device) as m, _ctx(m) as ref, _ctx(m) as late:
        _decode(ref, calls)
        want, want_lg = ref.mtp_draft(token, k, logits=True)
        late.set_mtp(False)
        _decode(late, calls)
        late.set_mtp(True)
        back = late.restore_point(n)
        assert back == 0
        late.truncate(back)
        _replay(late, calls, back)
        assert late.mtp_stats()["in_sync"]
        got, got_lg = late.mtp_draft(token, k, logits=True)
        assert got.tolist() == want.tolist()
        assert np.array_equal(got_lg, want_lg)


@pytest.mark.parametrize("device", DEVICES)
def test_switched_off_after_a_snapshot_resumes_from_it(path, device):
    # on through the prompt and a snapshot, off for some tokens, on again: the
    # restore point is the snapshot; replaying from it gives the always-on drafts
    rng = np.random.default_rng()
    calls = _calls(rng, int(rng.integers(10, 40)), int(rng.integers(4, 10)))
    n_on = sum(map(len, calls[:-3]))
    n = sum(map(len, calls))
    token, k = int(rng.integers(N_VOCAB)), int(rng.integers(1, 6))
    with Model(path, device) as m, _ctx(m) as ref, _ctx(m) as c:
        _decode(ref, calls)
        want, want_lg = ref.mtp_draft(token, k, logits=True)
        _decode(c, calls[:-3])
        c.snapshot()
        c.set_mtp(False)
        rows = c.mtp_stats()["rows_computed"]
        _decode(c, calls[-3:])
        assert c.mtp_stats()["rows_computed"] == rows == n_on - 1
        assert c.restore_point(n) == n          # off: the trunk's point
        c.set_mtp(True)
        assert c.mtp_draft(token, k).size == 0
        back = c.restore_point(n)
        assert back == n_on
        c.truncate(back)
        _replay(c, calls, back)
        assert c.mtp_stats()["rows_computed"] == rows + (n - n_on)
        got, got_lg = c.mtp_draft(token, k, logits=True)
        assert got.tolist() == want.tolist()
        assert np.array_equal(got_lg, want_lg)


@pytest.mark.parametrize("device", DEVICES)
def test_llama_runs_the_block_only_while_speculating(path, device):
    rng = np.random.default_rng()
    prompt = rng.integers(3, N_VOCAB, int(rng.integers(6, 14))).tolist()
    kw = dict(n_ctx=160, n_batch=32, n_threads=2, type_k="f32", type_v="f32", device=device)
    with Llama(str(path), **kw) as plain, Llama(str(path), draft_model="mtp", **kw) as spec:
        want = _greedy(plain, prompt, 48)
        mtp = spec.draft_model
        # not speculating (as a server slot for a request without it): the block is off
        spec.draft_model = None
        assert _greedy(spec, prompt, 16) == want[:16]
        assert spec._ctx.mtp_stats()["rows_computed"] == 0 and not spec._ctx.mtp_on
        # speculation switched on mid-stream: the cache is taken back to where the
        # block is in sync and decoded again; greedy output is still plain greedy
        spec.draft_model = mtp
        assert _greedy(spec, prompt + want[:16], 16) == want[16:32]
        t = spec.timings
        assert spec._ctx.mtp_on and t.verify_passes > 0 and t.drafted_tokens > 0, vars(t)
        # off again, then on: the rows written while it was on are reused
        spec.draft_model = None
        rows = spec._ctx.mtp_stats()["rows_computed"]
        assert _greedy(spec, prompt + want[:32], 8) == want[32:40]
        assert spec._ctx.mtp_stats()["rows_computed"] == rows
        spec.draft_model = mtp
        assert _greedy(spec, prompt + want[:40], 8) == want[40:48]
        assert spec.timings.drafted_tokens > 0
