"""Gemma 3 on the CUDA backend against the CPU backend (skipped without a GPU).

The CUDA backend runs gemma3's GeGLU, embedding scale and softcap (cuda/gemma.cu),
and its sliding-window layers through attn.cu, the one attention kernel that
masks the rows before a window (cuda/choose_attn.cu). Checked here:
- tiny random gemma3 models (window 24, every third layer global) whose prompts
  cross the window and the 64-position KV chunks: the GPU's logits against the
  CPU's, with the exact kernels (the same arithmetic but CUDA's tanhf inside
  gelu, which can move a gelu value by one f16 bit) and the default ones;
- any KV pool bound (the global layers stream, the local ones keep a ring)
  gives the all-resident GPU run's logits bit for bit; graph replay equals
  op-by-op launches;
- the real Gemma 3 270M Q4_K_M file against llama.cpp's teacher-forced logits
  (tests/data/gemma3_270m_teacher_forced.json), as tests/test_gemma3_golden.py
  holds the CPU.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from pyllamakv.core import native as N
from fixtures.gpu_cases import clear_top1, engine_logits, kl_rows
from test_gemma3_golden import DATA, KL_MAX, TOP1_MIN, _model_path, _score
from fixtures.tiny_gemma3 import write_tiny_gemma3

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(N.cuda_device_count() == 0, reason="no CUDA device")]

WTYPES = {"f32": T.F32, "q8_0": T.Q8_0, "q4_0": T.Q4_0}


def _tiny(tmp_path, wtype: str, seed: int):
    path = write_tiny_gemma3(tmp_path / f"g3-{wtype}.gguf", WTYPES[wtype], seed=seed)
    rng = np.random.default_rng(seed + 100)
    return path, [int(t) for t in rng.integers(4, 300, 150)]


@pytest.mark.parametrize("wtype", list(WTYPES))
@pytest.mark.parametrize("kernels", ["exact", "fast"])
def test_tiny_gemma3_matches_the_cpu(tmp_path, wtype, kernels):
    path, toks = _tiny(tmp_path, wtype, seed=list(WTYPES).index(wtype))
    cpu = engine_logits(path, toks, device="cpu", gpu_kernels=kernels)
    gpu = engine_logits(path, toks, device="cuda", gpu_kernels=kernels)
    assert np.all(np.isfinite(gpu))
    top1, n = clear_top1(cpu, gpu)
    kl = float(kl_rows(cpu, gpu).mean())
    print(f"gemma3 tiny {wtype} {kernels}: clear top-1 {top1:.4f} over {n}, mean KL {kl:.2e}, "
          f"max |diff| {np.abs(cpu - gpu).max():.3e}")
    assert top1 == 1.0
    assert kl <= (1e-5 if kernels == "exact" else 2e-3)


@pytest.mark.parametrize("pool_kib", [16, 96, 4096])
def test_tiny_gemma3_streaming_is_bit_identical(tmp_path, pool_kib):
    """A bound pool (global layers streamed, local layers in their ring)
    against all resident, on the GPU, prefill in several micro-batches then
    decodes past the window."""
    path, toks = _tiny(tmp_path, "q8_0", seed=7)
    m = N.Model(str(path), device="cuda")
    runs = []
    for pool in (None, pool_kib << 10):
        c = N.Context(m, n_ctx=256, n_batch=32, n_ubatch=32, kv_chunk=16,
                      kv_pool_bytes=pool, logits_all=True)
        rows = []
        for i in range(0, 96, 32):
            c.decode(toks[i:i + 32])
            rows.append(c.logits())
        for t in toks[96:]:
            c.decode([t])
            rows.append(c.logits())
        runs.append(np.concatenate(rows))
        c.close()
    m.close()
    assert np.array_equal(runs[0], runs[1]), np.abs(runs[0] - runs[1]).max()


def test_tiny_gemma3_graph_replay_is_bit_identical(tmp_path, monkeypatch):
    path, toks = _tiny(tmp_path, "q4_0", seed=3)
    runs = []
    for graph in ("1", "0"):
        monkeypatch.setenv("LKV_CUDA_GRAPH", graph)
        m = N.Model(str(path), device="cuda")
        c = N.Context(m, n_ctx=256, kv_chunk=16)
        c.decode(toks[:20])
        rows = [c.logits()]
        for t in toks[20:120]:
            c.decode([t])
            rows.append(c.logits())
        runs.append(np.concatenate(rows))
        c.close()
        m.close()
    assert np.array_equal(runs[0], runs[1])


@pytest.mark.parametrize("pool_mib", [None, 1], ids=["resident", "streamed"])
def test_real_gemma3_against_llama_cpp_on_the_gpu(pool_mib):
    if not DATA.exists():
        pytest.skip(f"golden data missing: {DATA}")
    golden = json.loads(DATA.read_text())
    agree, kls = [], []
    with N.Model(_model_path(), device="cuda") as m:
        for entry in golden["entries"]:
            tokens = entry["prompt_tokens"] + entry["greedy"]
            with N.Context(m, n_ctx=1024, n_batch=1024, n_ubatch=512, logits_all=True,
                           kv_pool_bytes=None if pool_mib is None else pool_mib << 20) as c:
                c.decode(tokens)
                a, k = _score(c.logits(), entry)
            agree += a
            kls += k
    top1, kl = float(np.mean(agree)), float(np.mean(kls))
    print(f"gemma3 270M on the GPU vs llama.cpp ({pool_mib} MiB pool): {len(agree)} positions, "
          f"top-1 {top1:.4f}, mean KL {kl:.5f}")
    assert top1 >= TOP1_MIN and kl <= KL_MAX, (top1, kl)
