"""tests/fixtures/kquant_blocks.py: the k-quant blocks it writes from weights decode,
through gguf.quants and through the library alike, to the weights within the
error of the type (a wrong byte layout decodes to noise: relative error ~1.4)."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import quants

from fixtures import kquant_blocks as kb
from test_quant import c_dequantize

# relative RMS error of the plain rule on Gaussian weights, with room
BOUND = {"q2_k": 0.40, "q3_k": 0.22, "q4_k": 0.10, "q5_k": 0.05, "q6_k": 0.025}


@pytest.mark.parametrize("name", sorted(BOUND))
def test_blocks_decode_to_the_weights(name):
    rng = np.random.default_rng()
    rows, cols = int(rng.integers(1, 9)), 256 * int(rng.integers(1, 5))
    x = (rng.standard_normal((rows, cols)) * rng.uniform(1e-3, 1.0)).astype(np.float32)
    raw = kb.quantize(x, name)
    t = getattr(T, name.upper())
    assert raw.size == rows * cols // 256 * kb.BYTES[name]
    ref = quants.dequantize(raw.reshape(rows, -1), t).reshape(rows, cols)
    np.testing.assert_array_equal(c_dequantize(t, raw, rows * cols).reshape(rows, cols), ref)
    err = float(np.sqrt(np.mean((ref - x) ** 2) / np.mean(x ** 2)))
    assert err < BOUND[name], f"{name}: relative RMS error {err:.3f}"


def test_rows_must_hold_whole_blocks():
    with pytest.raises(ValueError, match="not a multiple of 256"):
        kb.quantize(np.ones((2, 300), np.float32), "q4_k")
