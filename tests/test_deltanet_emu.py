"""The CUDA delta-rule kernels' thread code, run on the CPU (no GPU needed).

tests/cuda/emu_deltanet.cpp includes native/src/cuda/deltanet.cu (built with
LKV_DELTA_EMU: no CUDA headers, no launcher) and runs delta_kernel (the
recurrence) one thread block at a time, each CUDA thread a fiber, barriers and
warp shuffles as rendezvous (tests/cuda/emu_fibers.h); outputs and state
against a float64 recurrence, and one call per token against one call for all.
tests/cuda/emu_deltanet_chunk.cpp does the same for deltanet_chunk.cu's
delta_chunk_kernel (the chunked form on tensor cores, its mma.sync emulated
from the documented fragment layout) against the float64 recurrence over
several chunks. Their headers have the details. This test builds each with the
host C++ compiler (CXX, else c++ / g++ / clang++ on PATH; skipped when there
is none) and expects exit status 0. ~2 s to compile, 2-10 s to run each on a
shared 2-core machine.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMU = ("emu_deltanet", "emu_deltanet_chunk")


def _cxx() -> str | None:
    for c in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if c and shutil.which(c):
            return shutil.which(c)
    return None


CXX = _cxx()


@pytest.mark.skipif(CXX is None, reason="no C++ compiler (CXX, c++, g++, clang++)")
@pytest.mark.parametrize("name", EMU)
def test_delta_rule_kernel_on_host(tmp_path, name):
    exe = tmp_path / name
    src = os.path.join(ROOT, "tests", "cuda", name + ".cpp")
    cmd = [CXX, "-std=c++17", "-O1", "-ffp-contract=off", f"-I{ROOT}/native/src", src, "-o",
           str(exe)]
    b = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert b.returncode == 0, "compile failed (rc %d):\n%s\n%s" % (b.returncode, " ".join(cmd),
                                                                   b.stderr[-6000:])
    r = subprocess.run([str(exe)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=600)
    print(r.stdout)
    assert r.returncode == 0, r.stdout[-6000:]
