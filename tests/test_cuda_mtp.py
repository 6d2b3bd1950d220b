"""The MTP (nextn) block (native/src/mtp.c) on the CUDA backend against the
CPU backend (skipped without a CUDA device): on tiny random qwen35 models
with an MTP block, the block's draft logits after a prefill in micro-batches,
after single-token decodes (the trunk's graph path), after a truncation to a
snapshot, and the chained drafts, each within mean KL 1e-3 of the CPU (one
JSON line per case, collected by PYLLAMAKV_REPORT_DIR as test_cuda.py does);
and draft_model="mtp" greedy output on CUDA equal to plain greedy on CUDA."""
from __future__ import annotations

import json

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from pyllamakv import Llama
from pyllamakv.core import native as N
from fixtures.gpu_cases import kl_rows
from test_cuda import _report
from fixtures.tiny_qwen35 import write_tiny_qwen35

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(N.cuda_device_count() == 0, reason="no CUDA device")]

N_VOCAB = 320
KL_MAX = 1e-3
SHAPES = {"tiny": dict(), "hd256": dict(n_head=4, n_head_kv=1, head_dim=256, rope_dim=64,
                                        n_layer=4, interval=2)}


def _run(path, device, tokens, probes, **kw):
    """MTP logits (rows, n_vocab): for each probe (n, token) the trunk holds
    tokens[:n] (prefill of 48-token micro-batches, then single decodes, with a
    snapshot at 60 and a truncation back to it for n = 60) and drafts 3
    after `token`; returns the first step's rows and the chained steps' rows."""
    first, chains, drafts = [], [], []
    with N.Model(path, device=device) as m:
        c = N.Context(m, n_ctx=256, n_batch=128, n_ubatch=48, kv_chunk=32, n_threads=2, mtp=True,
                      **kw)
        c.decode(tokens[:60])
        c.snapshot()
        c.decode(tokens[60:70])
        for n, tok in probes:
            if n < c.n_tokens:
                c.truncate(n)
            while c.n_tokens < n:
                c.decode([tokens[c.n_tokens]])
            d, lg = c.mtp_draft(tok, 3, logits=True)
            assert d.size == 3, f"no drafts at {n} on {device}"
            first.append(lg[0])
            chains.append(lg)
            drafts.append(d)
        c.close()
    return np.asarray(first), chains, drafts


CASES = [("tiny", T.F32, "f16"), ("tiny", T.Q8_0, "q8_0"), ("hd256", T.F32, "f16")]


@pytest.mark.parametrize("shape,wtype,kv", CASES, ids=[f"{s}-{w.name}-{k}" for s, w, k in CASES])
def test_mtp_logits_match_the_cpu(tmp_path, shape, wtype, kv):
    seed = int(np.random.SeedSequence().entropy % 2**31)
    kw = dict(SHAPES[shape], n_nextn=1)
    if wtype == T.Q8_0:
        kw["n_layer"] = 4   # as test_cuda_qwen35.py: 8-bit activations over few layers
    path = write_tiny_qwen35(tmp_path / "m.gguf", wtype, seed=seed, **kw)
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, N_VOCAB, 100).tolist()
    probes = [(70, int(rng.integers(N_VOCAB))), (75, 3), (60, 9), (64, 11)]
    cpu, cpu_chain, cpu_d = _run(path, "cpu", tokens, probes, type_k=kv, type_v=kv)
    gpu, gpu_chain, gpu_d = _run(path, "cuda", tokens, probes, type_k=kv, type_v=kv)
    assert np.all(np.isfinite(gpu)), "non-finite MTP logits on CUDA"
    kl = kl_rows(cpu, gpu)
    # chained steps compare where both engines drafted the same tokens
    same = [i for i in range(len(probes)) if cpu_d[i][:2].tolist() == gpu_d[i][:2].tolist()]
    kl_chain = [float(kl_rows(cpu_chain[i], gpu_chain[i]).mean()) for i in same]
    line = dict(test="mtp", shape=shape, wtype=wtype.name, kv=kv, seed=seed,
                mean_kl=float(kl.mean()), max_kl=float(kl.max()),
                top1=float(np.mean(cpu.argmax(1) == gpu.argmax(1))),
                chains_compared=len(same), max_chain_kl=max(kl_chain, default=0.0))
    print(json.dumps(line))
    _report(line)
    assert kl.mean() <= KL_MAX, line
    assert max(kl_chain, default=0.0) <= KL_MAX, line


def test_draft_model_mtp_greedy_on_cuda(tmp_path):
    path = write_tiny_qwen35(tmp_path / "g.gguf", T.F32, seed=7, n_nextn=1)
    prompt = np.random.default_rng(7).integers(3, N_VOCAB, 12).tolist()
    kw = dict(n_ctx=128, n_batch=32, device="cuda")

    def greedy(llm):
        out = []
        for t in llm.generate(prompt, temp=0.0):
            out.append(t)
            if len(out) == 40:
                return out
    with Llama(str(path), **kw) as plain, Llama(str(path), draft_model="mtp", **kw) as spec:
        want, got = greedy(plain), greedy(spec)
        t = spec.timings
        assert t.drafted_tokens > 0, vars(t)
        assert got == want, f"first difference at {next(i for i in range(40) if got[i] != want[i])}"
