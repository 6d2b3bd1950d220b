"""The MTP block per sequence (native/src/mtp.c) in a context of several
sequences, on tiny random qwen35 models with an MTP block (as test_mtp.py):
each sequence's drafts (ids and logits) in a shared context are bit for bit
those of the same calls on a one-sequence context, its rows follow only its
own runs of a shared step, and its switch, snapshots, truncation, copy and
state are its own; against the numpy reference too. A Llama(n_seq_max=3,
draft_model="mtp") prompt list gives plain greedy's texts. The cases marked
gpu run the same on CUDA where there is a device."""
from __future__ import annotations

import numpy as np
import pytest

from pyllamakv import Llama
from fixtures.gpu_cases import skip_unless_gpu_seqs
from pyllamakv.core.native import Context, Model, cuda_device_count
from pyllamakv.errors import UnsupportedError
from reference_mtp import reference_mtp_draft
from fixtures.tiny_qwen35 import write_tiny_qwen35

N_VOCAB = 320
TOL = 1e-4   # f32 against the float64 reference, as test_mtp.py
DEVICES = ["cpu", pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(cuda_device_count() == 0, reason="no CUDA device")])]


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    seed = int(np.random.default_rng().integers(1 << 30))
    return write_tiny_qwen35(tmp_path_factory.mktemp("mtp-ms") / "mtp.gguf", seed=seed,
                             n_nextn=1)


def _skip_unrefused(m) -> None:
    """on a GPU: skipped where the library takes one MTP sequence per context there"""
    if m.device == "cuda":
        skip_unless_gpu_seqs(m, n_ctx=160, n_batch=64, n_ubatch=16, kv_chunk=32, type_k="f32",
                             type_v="f32", mtp=True, gpu_kernels="exact")


def _ctx(m, **kw):
    args = dict(n_ctx=160, n_batch=64, n_ubatch=16, kv_chunk=32, n_threads=2,
                type_k="f32", type_v="f32", mtp=True)
    if m.device == "cuda":
        args["gpu_kernels"] = "exact"
    args.update(kw)
    return Context(m, **args)


def _rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("device", DEVICES)
def test_each_sequence_drafts_as_alone(path, device):
    rng = np.random.default_rng()
    n_seq = 3
    prompts = [rng.integers(0, N_VOCAB, int(rng.integers(2, 40))).tolist() for _ in range(n_seq)]
    steps = rng.integers(0, N_VOCAB, (4, n_seq)).tolist()
    with Model(path, device) as m:
        _skip_unrefused(m)
    with Model(path, device) as m, _ctx(m, n_seq_max=n_seq) as multi:
        ones = [_ctx(m) for _ in range(n_seq)]
        try:
            for s, p in enumerate(prompts):   # prompts alone in a step, as the scheduler runs them
                multi.decode_batch(p, [s] * len(p))
                ones[s].decode(p)
            for i, st in enumerate(steps):    # decode steps shared
                multi.decode_batch(st, list(range(n_seq)))
                rows = multi.logits()
                for s in range(n_seq):
                    ones[s].decode([st[s]])
                    assert np.array_equal(rows[s], ones[s].logits()[-1]), (device, i, s)
                k = int(rng.integers(1, 5))
                for s in range(n_seq):
                    tok = int(rng.integers(N_VOCAB))
                    got, got_lg = multi.mtp_draft(tok, k, logits=True, seq=s)
                    want, want_lg = ones[s].mtp_draft(tok, k, logits=True)
                    assert got.size == k and got.tolist() == want.tolist(), (device, i, s)
                    assert np.array_equal(got_lg, want_lg), (
                        f"{device} step {i} sequence {s}: max diff "
                        f"{np.abs(got_lg - want_lg).max():.3g}")
            for s in range(n_seq):
                st = multi.mtp_stats(seq=s)
                assert st["in_sync"] and st["n_rows"] == len(prompts[s]) + len(steps) - 1
                assert st == ones[s].mtp_stats()
            # the numpy reference, for one sequence
            s = int(rng.integers(n_seq))
            hist = prompts[s] + [st[s] for st in steps]
            _, lg = multi.mtp_draft(7, 2, logits=True, seq=s)
            _, lg_ref = reference_mtp_draft(path, hist, 7, 2)
            assert _rel(lg, lg_ref) < TOL
        finally:
            for c in ones:
                c.close()


def test_several_runs_of_tokens_in_one_step(path):
    """prompts of two sequences in one decode_batch call (each run through its
    own block rows): drafts within f32 rounding of the reference"""
    rng = np.random.default_rng()
    a, b = (rng.integers(0, N_VOCAB, int(rng.integers(3, 30))).tolist() for _ in "ab")
    with Model(path) as m, _ctx(m, n_seq_max=3) as c:
        c.decode_batch(a + b, [0] * len(a) + [2] * len(b))
        more = rng.integers(0, N_VOCAB, (2, 3)).tolist()
        c.decode_batch(more[0] + more[1], [0] * 3 + [2] * 3)
        assert c.mtp_stats(seq=1)["n_rows"] == 0 and c.mtp_stats(seq=1)["rows_computed"] == 0
        for s, hist in ((0, a + more[0]), (2, b + more[1])):
            assert c.mtp_stats(seq=s)["n_rows"] == len(hist) - 1
            _, lg = c.mtp_draft(11, 3, logits=True, seq=s)
            _, lg_ref = reference_mtp_draft(path, hist, 11, 3)
            assert _rel(lg, lg_ref) < TOL, f"sequence {s}: relative error {_rel(lg, lg_ref):.2e}"


@pytest.mark.parametrize("device", DEVICES)
def test_switch_snapshot_truncate_copy_state_per_sequence(path, device):
    rng = np.random.default_rng()
    p0, p1, p2 = (rng.integers(0, N_VOCAB, int(rng.integers(4, 30))).tolist() for _ in "abc")
    more = rng.integers(0, N_VOCAB, 6).tolist()
    with Model(path, device) as m:
        _skip_unrefused(m)
    with Model(path, device) as m, _ctx(m, n_seq_max=3) as c, _ctx(m) as one:
        c.set_mtp(False, seq=1)
        assert c.mtp_on_for(0) and not c.mtp_on_for(1) and c.mtp_on_for(2)
        for s, p in enumerate((p0, p1, p2)):
            c.decode_batch(p, [s] * len(p))
        c.seq_snapshot(2)
        one.decode(p2)
        one.snapshot()
        for t in more:                       # every sequence steps; 1 computes no block rows
            c.decode_batch([t, t, t], [0, 1, 2])
            one.decode([t])
        assert c.mtp_stats(seq=1)["rows_computed"] == 0
        assert c.mtp_stats(seq=0)["rows_computed"] == len(p0) + len(more) - 1
        with pytest.raises(UnsupportedError, match="switched off"):
            c.mtp_draft(3, 2, seq=1)
        assert c.mtp_draft(3, 2, seq=0).size == 2
        # sequence 2 back to its snapshot: the block there, as on a context of its own
        n2 = len(p2) + len(more)
        assert c.seq_restore_point(2, n2 - 1) == len(p2) == one.restore_point(n2 - 1)
        c.seq_truncate(2, len(p2))
        one.truncate(len(p2))
        got, got_lg = c.mtp_draft(5, 3, logits=True, seq=2)
        want, want_lg = one.mtp_draft(5, 3, logits=True)
        assert got.tolist() == want.tolist() and np.array_equal(got_lg, want_lg)
        # switched on behind: sequence 1 drafts nothing, its restore point is 0
        c.set_mtp(True, seq=1)
        assert c.mtp_draft(3, 2, seq=1).size == 0
        assert c.seq_restore_point(1, len(p1) + len(more)) == 0
        # a copy carries the block: sequence 1 becomes sequence 0
        c.seq_copy(0, 1)
        a, a_lg = c.mtp_draft(9, 3, logits=True, seq=0)
        b, b_lg = c.mtp_draft(9, 3, logits=True, seq=1)
        assert a.tolist() == b.tolist() and np.array_equal(a_lg, b_lg)
        t = int(rng.integers(N_VOCAB))
        c.decode_batch([t, t], [0, 1])
        assert np.array_equal(c.logits()[0], c.logits()[1])
        a, a_lg = c.mtp_draft(9, 3, logits=True, seq=0)
        b, b_lg = c.mtp_draft(9, 3, logits=True, seq=1)
        assert a.tolist() == b.tolist() and np.array_equal(a_lg, b_lg)
        # a loaded state: out of sync for that sequence only
        c.seq_state_set(2, c.seq_state_get(0))
        assert c.mtp_draft(9, 2, seq=2).size == 0 and c.mtp_draft(9, 2, seq=0).size == 2
        with pytest.raises(Exception, match="sequence id"):
            c.mtp_draft(9, 2, seq=3)


def test_llama_prompt_list_with_mtp_equals_plain_greedy(path):
    rng = np.random.default_rng()
    kw = dict(n_ctx=128, n_batch=32, n_threads=2, type_k="f32", type_v="f32")
    prompts = [rng.integers(3, N_VOCAB, int(rng.integers(4, 16))).tolist() for _ in range(3)]
    with Llama(str(path), **kw) as plain:
        want = [plain.create_completion(p, max_tokens=12, temperature=0)["choices"][0]["text"]
                for p in prompts]
    with Llama(str(path), n_seq_max=3, draft_model="mtp", **kw) as spec:
        out = spec.create_completion(prompts, max_tokens=12, temperature=0)
        assert [c["text"] for c in out["choices"]] == want
        # one prompt on its own, on the same engine: speculation through sequence 0's
        # block (a prompt list does not speculate: api/decoding.py switches its
        # sequences' blocks off)
        got = spec.create_completion(prompts[1], max_tokens=12, temperature=0)
        assert got["choices"][0]["text"] == want[1]
        assert spec.timings.drafted_tokens > 0 and spec._ctx.mtp_stats(seq=0)["draft_steps"] > 0


def test_memory_plan_counts_a_block_per_sequence(path):
    """the core's dry run: each sequence adds its block state (its K/V of n_ctx
    rows, its hidden rows) to the MTP part, the scratch rows counted once"""
    from pyllamakv.core.native_plan import memory_plan
    from pyllamakv.memory.plan import kv_row_bytes
    with Model(path) as m:
        hp, tensors = m.hparams, m.file.tensors
    kw = dict(n_ctx=256, n_batch=64, n_ubatch=64, mtp=True, type_k="f32", type_v="f32")
    mtp = [memory_plan(tensors, hp, "cpu", n_seq_max=n, **kw).mtp for n in (1, 2, 3)]
    step = mtp[1] - mtp[0]
    assert mtp[2] - mtp[1] == step and step >= 2 * 256 * kv_row_bytes(hp, "f32")
    assert mtp[0] > step   # the shared scratch rows beside sequence 0's state
