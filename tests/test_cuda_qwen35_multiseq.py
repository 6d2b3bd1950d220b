"""A hybrid model (tiny qwen35: Gated DeltaNet + gated full attention) with
several sequences in one context on CUDA (skipped without a GPU). Each
sequence has its own recurrent state (conv and delta-rule state, snapshots),
and a captured decode step's key names its sequence (forward.c graph_key), so:

- single-sequence decode calls of 3 sequences interleaved (each step captured
  or updated for its sequence, replayed with that sequence's state pointers
  only) give each sequence bit for bit the logits of a context of its own,
  with the graphs on and off, exact and fast kernels;
- decode steps shared by the sequences (1 to 3 tokens each, one call) after
  prompts run alone: bit for bit those of the sequences alone (exact kernels);
- random scripts (tests/hybrid_script.py: prompts of up to 100 tokens, so the
  chunked delta rule runs on a run that starts inside the micro-batch, beside
  single tokens; snapshots and truncation to them; copies; state blobs;
  resets): exact kernels bit for bit against contexts of one sequence each;
  fast kernels within the GPU tolerance of test_cuda_qwen35.py (mean KL 1e-3,
  every clear top-1 kept; the prefill kernels change with a step's total rows);
- the shared CUDA run against the shared CPU run of the same script within
  that tolerance.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from pyllamakv.core import native as N
from fixtures.gpu_cases import clear_top1, kl_rows, skip_unless_gpu_seqs
from fixtures.tiny_qwen35 import write_tiny_qwen35
from hybrid_script import make_script, run_alone, run_shared
from multiseq_script import compare

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(N.cuda_device_count() == 0, reason="no CUDA device")]

N_VOCAB = 320
KL_MAX = 1e-3
N_SEQ = 3
# the default tiny shape and the 27B's delta-rule heads (dk = dv = 128, 3 value
# heads per key head; head_dim 256 with partial rope)
SHAPES = {
    "tiny": dict(),
    "dk128": dict(nk=2, nv=6, dk=128, dv=128, n_layer=4, n_head=4, n_head_kv=1, head_dim=256,
                  rope_dim=64),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("q35ms-cuda")
    seed = int(np.random.SeedSequence().entropy % 2**30)
    return {name: write_tiny_qwen35(d / f"{name}.gguf", T.F32, seed=seed + i, **kw)
            for i, (name, kw) in enumerate(SHAPES.items())}


@pytest.fixture(scope="module", autouse=True)
def gpu_seqs(models):
    """skips the module where the library takes one hybrid sequence per context on
    the GPU (native/src/context.c: a build without -DLKV_GPU_SEQS=1)"""
    with N.Model(models["tiny"], device="cuda") as m:
        skip_unless_gpu_seqs(m, **_kw())


def _kw(**over):
    kw = dict(n_ctx=320, n_batch=160, n_ubatch=160, kv_chunk=32, n_threads=2)
    kw.update(over)
    return kw


def _flat(rows):
    return np.concatenate([np.concatenate(r) for r in rows if r])


def _close(ref, got, label):
    """mean KL <= KL_MAX and every clear top-1 kept, per sequence"""
    for s, (a, b) in enumerate(zip(ref, got)):
        if not a:
            continue
        x, y = np.concatenate(a), np.concatenate(b)
        assert np.all(np.isfinite(y)), f"{label}: sequence {s}: non-finite logits"
        kl = kl_rows(x, y)
        clear, n_clear = clear_top1(x, y)
        line = dict(case=label, seq=s, rows=len(x), mean_kl=float(kl.mean()),
                    max_kl=float(kl.max()), clear_top1=clear, n_clear=n_clear)
        print(json.dumps(line))
        assert kl.mean() <= KL_MAX and clear == 1.0, line


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("kernels", ["exact", "fast"])
@pytest.mark.parametrize("graph", ["1", "0"])
def test_interleaved_decodes_equal_alone(models, monkeypatch, shape, kernels, graph):
    """prompts alone, then 40 rounds of one single-token decode call per
    sequence, in turn (each call a one-sequence step: the graph path), with a
    snapshot, a truncation to it and more decodes for one sequence between"""
    monkeypatch.setenv("LKV_CUDA_GRAPH", graph)
    rng = np.random.default_rng()
    prompts = [rng.integers(0, N_VOCAB, int(n)).tolist() for n in rng.integers(5, 90, N_SEQ)]
    steps = rng.integers(0, N_VOCAB, (40, N_SEQ)).tolist()
    kw = _kw(gpu_kernels=kernels, logits_all=False)
    with N.Model(models[shape], device="cuda") as m:
        def play(ctx_of, snap_of, back_of):
            out = [[] for _ in range(N_SEQ)]
            for s, p in enumerate(prompts):
                ctx_of(s).decode_batch(p, [s if ctx_of(s).n_seq_max > 1 else 0] * len(p))
            for i, st in enumerate(steps):
                for s in range(N_SEQ):
                    c = ctx_of(s)
                    c.decode_batch([st[s]], [s if c.n_seq_max > 1 else 0])
                    out[s].append(c.logits()[-1:].copy())
                if i == 10:
                    snap_of(1)
                if i == 25:
                    back_of(1)
            return out

        with N.Context(m, n_seq_max=N_SEQ, **kw) as c:
            n_snap = []

            def back(s):
                p = c.seq_restore_point(s, c.seq_n_tokens(s) - 1)
                n_snap.append(p)
                c.seq_truncate(s, p)
            shared = play(lambda s: c, c.seq_snapshot, back)
        ones = [N.Context(m, **kw) for _ in range(N_SEQ)]
        try:
            def back1(s):
                o = ones[s]
                p = o.restore_point(o.n_tokens - 1)
                n_snap.append(p)
                o.truncate(p)
            alone = play(lambda s: ones[s], lambda s: ones[s].snapshot(), back1)
        finally:
            for o in ones:
                o.close()
    assert n_snap[0] == n_snap[1] == len(prompts[1]) + 11, n_snap
    compare(shared, alone, f"CUDA interleaved, {shape}, {kernels}, graph {graph}")


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("kernels", ["exact", "fast"])
def test_shared_decode_steps_equal_alone(models, shape, kernels):
    """prompts alone (the chunked delta rule for those of 64 tokens and more),
    then steps of 1 to 3 tokens of every sequence in one call; with the exact
    kernels bit for bit those of the sequences alone, with the fast ones
    within the GPU tolerance (the kernels change with a step's rows)"""
    rng = np.random.default_rng()
    prompts = [rng.integers(0, N_VOCAB, int(n)).tolist() for n in rng.integers(20, 140, N_SEQ)]
    steps = [[rng.integers(0, N_VOCAB, int(rng.integers(1, 4))).tolist() for _ in range(N_SEQ)]
             for _ in range(12)]
    kw = _kw(gpu_kernels=kernels)
    shared, alone = [[] for _ in range(N_SEQ)], [[] for _ in range(N_SEQ)]
    with N.Model(models[shape], device="cuda") as m:
        with N.Context(m, n_seq_max=N_SEQ, **kw) as c:
            for s, p in enumerate(prompts):
                c.decode_batch(p, [s] * len(p))
            for st in steps:
                toks = [t for run in st for t in run]
                seqs = [s for s, run in enumerate(st) for _ in run]
                c.decode_batch(toks, seqs, [True] * len(toks))
                rows, k = c.logits(), 0
                for s, run in enumerate(st):
                    shared[s].append(rows[k:k + len(run)].copy())
                    k += len(run)
        for s, p in enumerate(prompts):
            with N.Context(m, **kw) as c1:
                c1.decode(p)
                for st in steps:
                    c1.decode(st[s], n_logits=len(st[s]))
                    alone[s].append(c1.logits().copy())
    if kernels == "exact":
        compare(shared, alone, f"CUDA shared steps, {shape}")
    else:
        _close(alone, shared, f"CUDA shared steps, {shape}, fast")


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("kernels", ["exact", "fast"])
def test_scripts_equal_alone(models, seed, kernels):
    rng = np.random.default_rng(seed * 7919 + int(np.random.default_rng().integers(1 << 20)))
    kw = _kw(gpu_kernels=kernels)
    with N.Model(models["tiny"], device="cuda") as m:
        events = make_script(rng, N_SEQ, N_VOCAB, kw["n_ctx"], kw["n_batch"], 40, long=100)
        with N.Context(m, n_seq_max=N_SEQ, **kw) as c:
            shared, p_shared = run_shared(c, events, N_SEQ)
        ones = [N.Context(m, **kw) for _ in range(N_SEQ)]
        try:
            alone, p_alone = run_alone(ones, events, N_SEQ)
        finally:
            for o in ones:
                o.close()
    assert p_shared == p_alone
    if kernels == "exact":
        compare(shared, alone, f"CUDA hybrid script, seed {seed}")
    else:
        _close(alone, shared, f"CUDA hybrid script, seed {seed}, fast")


@pytest.mark.parametrize("shape", list(SHAPES))
def test_shared_cuda_against_shared_cpu(models, shape):
    rng = np.random.default_rng()
    kw = _kw()
    events = make_script(rng, N_SEQ, N_VOCAB, kw["n_ctx"], kw["n_batch"], 30, long=100)
    runs = {}
    for device in ("cpu", "cuda"):
        with N.Model(models[shape], device=device) as m, \
                N.Context(m, n_seq_max=N_SEQ, **kw) as c:
            runs[device] = run_shared(c, events, N_SEQ)
    assert runs["cpu"][1] == runs["cuda"][1]
    _close(runs["cpu"][0], runs["cuda"][0], f"CUDA vs CPU, shared, {shape}")


def test_state_blobs_move_between_sequences_and_devices(models):
    """a state saved from sequence 2 of a CUDA context loads into sequence 1
    and into a one-sequence CPU context; both go on as sequence 2"""
    rng = np.random.default_rng()
    a = rng.integers(0, N_VOCAB, 100).tolist()
    b = rng.integers(0, N_VOCAB, 12).tolist()
    with N.Model(models["tiny"], device="cuda") as m, \
            N.Context(m, n_seq_max=N_SEQ, **_kw(gpu_kernels="exact")) as c:
        c.decode_batch(a, [2] * len(a))
        blob = c.seq_state_get(2)
        c.decode_batch(rng.integers(0, N_VOCAB, 7).tolist(), [1] * 7)   # something to overwrite
        c.seq_state_set(1, blob)
        assert c.seq_n_tokens(1) == len(a)
        rows = []
        for t in b:
            c.decode_batch([t, t], [1, 2])
            rows.append(c.logits().copy())
        rows = np.array(rows)
        assert np.array_equal(rows[:, 0], rows[:, 1])
    with N.Model(models["tiny"], device="cpu") as mc, N.Context(mc, **_kw()) as cpu:
        cpu.state_set(blob)
        want = []
        for t in b:
            cpu.decode([t])
            want.append(cpu.logits()[-1])
    kl = kl_rows(np.array(want), rows[:, 0])
    assert kl.mean() <= KL_MAX, f"CUDA sequence state continued on the CPU: mean KL {kl.mean():.3g}"
