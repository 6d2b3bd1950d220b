"""The CUDA decode kernels' thread code, run on the CPU (no GPU needed).

tests/cuda/emu_mvx.cu includes native/src/cuda/mvx.cu, whose helpers are
__host__ __device__, and runs mvx2_kernel's per-thread code (the thread
setup, the cp.async copies of each stage into a ring, the decoding and the
chain steps) on the host, one thread block at a time: every copy's range,
every chain step's operands against exact.cuh's addressing, and the outputs
bit for bit against the CPU's arithmetic, for every legacy weight type,
n = 1..8 and the 8B model's shapes (its header comment has the details).

This test compiles it with nvcc (skipped when nvcc is not found: NVCC, PATH,
then CUDA_PATH / CUDA_HOME / CUDA_ROOT and /usr/local/cuda, as the meson build
finds the toolkit), with the build's CUDA flags (-std=c++17 --fmad=false
-DLKV_HAVE_CUDA=1; -arch=sm_90 only so that the device pass has a target,
nothing runs on a device) and -O1, runs it and expects exit status 0.

Time on a 2-core machine (nvcc 13): the compile ~15 s (~25 s with the host
compile at -O2; the device pass has no kernel to generate, see the .cu), the
run ~3-6 s. The library is not needed.

- LKV_EMU_FULL=1: the full case list (every tile of the 8B q/k/v and o
  launches; ~13 s more).
- LKV_TEST_SEED=n: the same random inputs as a run that printed seed n.
- LKV_EMU_MVX_INCLUDE=dir: searched before native/src/cuda, e.g. a directory
  holding a modified copy of mvx.cu to check.

tests/cuda/emu_attn_ring.cu does the same for the q8_0 decode attention
(attn_dec_ring2.cu): one block's copies, scores and V pass thread by thread,
bit for bit against a transcription of attn_dec_ring.cu's per-thread code,
head_dim 64 / 128 and G 1, 2, 3, 4, 8 (~5 s to compile and run).
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "tests", "cuda", "emu_mvx.cu")


def find_nvcc() -> str | None:
    cands = [os.environ.get("NVCC"), shutil.which("nvcc")]
    cands += [os.path.join(os.environ[v], "bin", "nvcc")
              for v in ("CUDA_PATH", "CUDA_HOME", "CUDA_ROOT") if os.environ.get(v)]
    cands.append("/usr/local/cuda/bin/nvcc")
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


NVCC = find_nvcc()
pytestmark = pytest.mark.skipif(
    NVCC is None, reason="nvcc not found (NVCC, PATH, CUDA_PATH/CUDA_HOME/CUDA_ROOT, "
                         "/usr/local/cuda): the emulators need it to compile")


def _report(out: str, keep: int = 60) -> str:
    """The failure lines first, then the end of the output."""
    lines = out.splitlines()
    bad = [ln for ln in lines if "FAIL" in ln or "MISMATCH" in ln or "ERROR" in ln
           or "OUTPUT" in ln][:40]
    head = [ln for ln in lines[:1] if ln.startswith("seed")]
    return "\n".join(head + bad + ["...", *lines[-keep:]])


def _compile_and_run(tmp_path, name: str, src: str, incs: list[str]) -> None:
    exe = tmp_path / name
    cmd = [NVCC, "-std=c++17", "--fmad=false", "-DLKV_HAVE_CUDA=1", "-arch=sm_90", "-O1",
           "-Xcompiler", "-ffp-contract=off", *[f"-I{d}" for d in incs], src, "-o", str(exe)]
    b = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert b.returncode == 0, ("nvcc failed (rc %d):\n%s\n%s\n%s" %
                               (b.returncode, " ".join(cmd), b.stdout[-4000:], b.stderr[-8000:]))
    r = subprocess.run([str(exe)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=900)
    last = r.stdout.strip().splitlines()[-1:] or ["(no output)"]
    print(last[0])
    assert r.returncode == 0, "%s: rc %d\n%s" % (name, r.returncode, _report(r.stdout))


INCS = [os.path.join(ROOT, d) for d in ("native/include", "native/src", "native/src/cuda")]


def test_mvx_thread_code_on_host(tmp_path):
    extra = os.environ.get("LKV_EMU_MVX_INCLUDE")
    incs = ([os.path.abspath(extra)] if extra else []) + INCS
    _compile_and_run(tmp_path, "emu_mvx", SRC, incs)


def test_attn_ring2_thread_code_on_host(tmp_path):
    _compile_and_run(tmp_path, "emu_attn_ring",
                     os.path.join(ROOT, "tests", "cuda", "emu_attn_ring.cu"), INCS)
