"""SmolLM2-135M-Instruct Q4_1 teacher-forced against llama.cpp's golden data
(method in ../shared/golden/README.md): top-1 agreement and mean KL of
llama.cpp's top-32 distribution (renormalised) from ours on the same ids.

The golden logits are those of llama.cpp's AVX2 CPU build (no AVX-512, no AMX,
flash attention off) evaluating prompt + greedy tokens in one batch; the CPU
backend follows that arithmetic, so the expected result is agreement 1.0 and
KL ~0 (the AVX-512 build of llama.cpp, no AMX, scores about 0.93 / 0.0025)."""
import json

import numpy as np
import pytest

from _smollm2 import require_model_path
from fixtures.golden import GOLDEN, golden_scores


def golden_agreement(device: str = "cpu") -> tuple[float, float, int]:
    """(top-1 agreement, mean KL, positions) of the default model on `device`."""
    path = require_model_path()
    gfile = GOLDEN / "smollm2_teacher_forced.json"
    if not gfile.exists():
        pytest.skip(f"golden data missing: {gfile}")
    agree, kls = golden_scores(path, json.loads(gfile.read_text()), device)
    return float(np.mean(agree)), float(np.mean(kls)), len(agree)


def check_golden(device: str = "cpu") -> None:
    top1, kl, n = golden_agreement(device)
    print(f"golden ({device}): {n} positions, top-1 agreement {top1:.4f}, mean KL {kl:.5f}")
    assert top1 >= 0.98, f"top-1 agreement {top1:.4f} < 0.98 (mean KL {kl:.5f})"
    assert kl <= 0.002, f"mean KL {kl:.5f} > 0.002 (top-1 {top1:.4f})"


def test_teacher_forced_against_llama_cpp():
    check_golden("cpu")
