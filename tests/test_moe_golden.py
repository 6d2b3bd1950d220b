"""qwen3moe and qwen35moe against llama.cpp itself: tiny random models written
from the fixed seeds of tests/golden_moe.py (the same bits as the files
llama.cpp read) are scored teacher-forced against the top-16 log-probabilities
llama.cpp (llama-cpp-python 0.3.36, CPU) gave at every position
(tests/data/moe_tiny_llamacpp.json). f32 files: the same distributions to
float rounding (log-probs within 3e-4 when written); q8_0 files: both engines
quantize activations to 8 bits the same way: qwen3moe's log-probs agree to the
data's 1e-6 rounding; qwen35moe's within 7e-3 on average, 0.5 at worst,
the top token everywhere (the dense qwen35 at q8_0 is off from llama.cpp too,
by 2e-3 on average)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from golden_moe import CASES, OUT, write_case
from pyllamakv.core.native import Context, Model

DATA = json.loads(OUT.read_text())


def _logprobs(path, tokens) -> np.ndarray:
    with Model(path) as m, Context(m, n_ctx=256, n_batch=256, n_ubatch=256, logits_all=True,
                                   n_threads=2) as c:
        c.decode(tokens)
        x = c.logits().astype(np.float64)
    x -= x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


@pytest.mark.parametrize("name", list(CASES))
def test_moe_matches_llama_cpp(tmp_path, name):
    ref = DATA["cases"][name]
    lp = _logprobs(write_case(name, tmp_path / "m.gguf"), ref["tokens"])
    ids, want = np.array(ref["ids"]), np.array(ref["logprobs"])
    got = np.take_along_axis(lp, ids, -1)
    diff = np.abs(got - want)
    top1 = (lp.argmax(-1) == ids[:, 0]).mean()
    # KL over llama.cpp's top 16 (the rest of its mass: at most a few %)
    p = np.exp(want)
    kl = (p * (want - got)).sum(-1)
    print(f"{name}: top-16 log-prob |diff| max {diff.max():.3g} mean {diff.mean():.3g}; "
          f"top-1 {top1:.4f}; KL(top-16) mean {kl.mean():.3g} max {kl.max():.3g}")
    if name == "qwen3moe-q8_0":   # the same activation quantization: llama.cpp's bits
        assert diff.max() < 1e-4
    if "f32" in name:
        assert diff.max() < 5e-3 and top1 == 1.0
    else:
        assert np.median(diff) < 2e-2 and kl.mean() < 5e-3 and top1 > 0.95
