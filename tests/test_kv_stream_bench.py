"""benchmarks/benchmark_kv_stream.py on the CPU with the tiny synthetic shape:
a second run into the same --out skips the rows it already holds and says so,
and a run with other KV types measures its own rows."""
from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "benchmark_kv_stream.py"


def _run(out, type_k):
    depth = int(np.random.default_rng().integers(600, 1500))
    cmd = [sys.executable, str(SCRIPT), "--shape", "llama-tiny", "--fill", "state", "--out",
           str(out), "--depths", str(depth), "--pools", "1", "--n-gen", "4", "--repeat", "1",
           "--type-k", type_k, "--device", "cpu"]
    return depth, cmd


def test_resume_skips_only_the_same_rows(tmp_path):
    depth, cmd = _run(tmp_path, "q8_0")
    first = subprocess.run(cmd, capture_output=True, text=True, check=True)
    again = subprocess.run(cmd, capture_output=True, text=True, check=True)
    other = subprocess.run(cmd[:-3] + ["f16", "--device", "cpu"], capture_output=True, text=True,
                           check=True)
    assert first.stdout.count(f"depth={depth} ") == 2, first.stdout + first.stderr
    assert again.stdout.count(f"depth={depth} ") == 0, again.stdout
    assert again.stderr.count("skipped (already in") == 2, again.stderr
    assert other.stdout.count(f"depth={depth} ") == 2, other.stdout + other.stderr
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert sorted((r["type_k"], r["mode"]) for r in rows) == [
        ("f16", "pool 1 MiB"), ("f16", "resident"), ("q8_0", "pool 1 MiB"), ("q8_0", "resident")]
