"""benchmarks/golden_noise.py on the CPU: draw 0 (the file unchanged) is
llama.cpp's arithmetic bit for bit (test_golden.py's figures), a draw that
moves 8 block scales by one ulp changes the scores, the scale offsets point at
the f16 scales of legacy-type blocks, and the model file is left as it was."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

from _smollm2 import require_model_path
from fixtures.golden import GOLDEN

from fixtures import noise as gn

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "golden_noise.py"


def test_scale_offsets_are_block_scales():
    """doubling the f16 at an offset doubles its block as gguf.quants
    dequantizes it (less the block minimum m, the next f16, for q4_1 / q5_1)"""
    path = require_model_path()
    offs = gn.block_scales(path)
    raw = np.fromfile(path, np.uint8)
    tensors = [t for t in GGUFReader(path).tensors
               if t.name.startswith("blk.") and t.tensor_type in gn.LEGACY]
    rng = np.random.default_rng()
    for off in rng.choice(offs, 64, replace=False):
        t = next(t for t in tensors if t.data_offset <= off < t.data_offset + t.n_bytes)
        _, size = GGML_QUANT_SIZES[t.tensor_type]
        assert (off - t.data_offset) % size == 0, (t.name, int(off))
        block = raw[off:off + size].copy()
        d = np.frombuffer(block[:2].tobytes(), np.float16)[0]
        doubled = block.copy()
        doubled[:2] = np.frombuffer(np.float16(2 * d).tobytes(), np.uint8)
        x = dequantize(block.reshape(1, -1), t.tensor_type).astype(np.float64)
        x2 = dequantize(doubled.reshape(1, -1), t.tensor_type).astype(np.float64)
        m = float(np.frombuffer(block[2:4].tobytes(), np.float16)[0]) \
            if t.tensor_type in (T.Q4_1, T.Q5_1) else 0.0
        np.testing.assert_allclose(x2 - m, 2 * (x - m), rtol=1e-3, atol=1e-6,
                                   err_msg=f"{t.name} block at {int(off)}")


def test_draws_on_the_cpu():
    path = require_model_path()
    if not (GOLDEN / "smollm2_teacher_forced.json").exists():
        pytest.skip("golden data missing")
    before = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    out = subprocess.run([sys.executable, str(SCRIPT), path, "--draws", "1", "--blocks", "8"],
                         capture_output=True, text=True, check=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["draw"] for r in rows] == [0, 1], out
    d0, d1 = rows
    assert d0["blocks"] == 0 and d1["blocks"] == 8
    assert d0["top1"] >= 0.98 and d0["mean_kl"] <= 0.002, d0
    assert d1["mean_kl"] != d0["mean_kl"], (d0, d1)
    assert "1 draws of 8 blocks (cpu)" in out, out
    assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == before
