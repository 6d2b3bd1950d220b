"""The k-quant / iq4_xs decode mat-vec's lane code (native/src/cuda/mvq.cu),
run on the CPU, against numpy (no GPU needed).

tests/cuda/emu_mvq.cu includes mvq.cu, whose lane code (mq_lane) and units
(mvq_units.cuh) are __host__ __device__, and runs every lane of every group
of R rows on the host. Here: fresh random blocks (random bytes, finite
random f16 scales) of q2_K, q3_K, q4_K, q5_K, q6_K and iq4_xs, random 8-bit
activation codes in 32-groups with their d and d * code sum (the q8_K codes
the chooser gives mvq), 1 to 16 tokens, 1, 2 and 4 rows a warp, widths of 1,
3, 10 and 56 super-blocks (lanes without a unit, lanes with one more unit
than others, 7 units a lane) and row counts that leave every tail of the row
groups; the outputs against gguf.quants' dequantized rows times the
activations in float64 (relative 1e-5 of the largest output, test_ops' bound
for the kernel on a GPU).

Compiled with nvcc (skipped without it: test_cuda_emu.find_nvcc), ~15 s.
"""
from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

from test_cuda_emu import INCS, NVCC

gguf = pytest.importorskip("gguf")
from gguf.quants import dequantize  # noqa: E402

pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc not found: the emulator needs it to compile")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "tests", "cuda", "emu_mvq.cu")
Q = gguf.GGMLQuantizationType

# type: (ggml id, block bytes, byte offsets of the block's f16 scales)
TYPES = {
    "q2_K": (Q.Q2_K, 84, (80, 82)),
    "q3_K": (Q.Q3_K, 110, (108,)),
    "q4_K": (Q.Q4_K, 144, (0, 2)),
    "q5_K": (Q.Q5_K, 176, (0, 2)),
    "q6_K": (Q.Q6_K, 210, (208,)),
    "iq4_xs": (Q.IQ4_XS, 136, (0,)),
}


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    exe = tmp_path_factory.mktemp("emu") / "emu_mvq"
    cmd = [NVCC, "-std=c++17", "--fmad=false", "-DLKV_HAVE_CUDA=1", "-arch=sm_90", "-O1",
           "-Xcompiler", "-ffp-contract=off", *[f"-I{d}" for d in INCS], SRC, "-o", str(exe)]
    b = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert b.returncode == 0, f"nvcc failed:\n{' '.join(cmd)}\n{b.stderr[-6000:]}"
    return str(exe)


def _blocks(rng, nbytes: int, halves: tuple[int, ...], rows: int, cols: int) -> np.ndarray:
    nb = rows * cols // 256
    w = rng.integers(0, 256, size=(nb, nbytes), dtype=np.uint8)
    for off in halves:   # finite positive scales of a realistic size
        h = rng.uniform(2e-3, 3e-2, size=nb).astype(np.float16)
        w[:, off:off + 2] = h.view(np.uint8).reshape(nb, 2)
    return w.reshape(rows, -1)


def _case(rng, tmp, emu, name: str, rows: int, cols: int, n: int, r: int) -> None:
    qt, nbytes, halves = TYPES[name]
    w = _blocks(rng, nbytes, halves, rows, cols)
    xq = rng.integers(-127, 128, size=(n, cols), dtype=np.int8)
    xd = rng.uniform(1e-3, 1e-2, size=(n, cols // 32)).astype(np.float32)
    xs = (xd * xq.reshape(n, -1, 32).sum(axis=2, dtype=np.int32)).astype(np.float32)
    path = tmp / f"{name}_{rows}x{cols}_n{n}_r{r}.bin"
    with open(path, "wb") as f:
        f.write(np.array([int(qt), rows, cols, n, r], np.int32).tobytes())
        f.write(w.tobytes() + xq.tobytes() + xd.tobytes() + xs.tobytes())
    out = subprocess.run([emu, str(path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    y = np.fromfile(f"{path}.out", np.float32).reshape(n, rows)
    wf = dequantize(w, qt).astype(np.float64)                          # (rows, cols)
    x = np.repeat(xd.astype(np.float64), 32, axis=1) * xq.astype(np.float64)
    ref = x @ wf.T                                                      # (n, rows)
    err = np.max(np.abs(y - ref)) / np.max(np.abs(ref))
    assert np.all(np.isfinite(y)), f"{name} {rows}x{cols} n={n} R={r}: an output not written"
    assert err < 1e-5, f"{name} {rows}x{cols} n={n} R={r}: relative error {err:.2e}"


@pytest.mark.parametrize("name", list(TYPES))
def test_mvq_lane_code_against_numpy(emu, tmp_path, name):
    rng = np.random.default_rng()
    for cols, rows in ((256, 7), (768, 37), (2560, 5), (14336, 3)):
        for n in (1, 2, 3, 8, 16):
            for r in (1, 2, 4):
                if r == 4 and n > 2:
                    continue   # mvq takes 2 rows a warp above 2 tokens
                _case(rng, tmp_path, emu, name, rows, cols, n, r)
