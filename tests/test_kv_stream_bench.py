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


def _cmd(out, depth, type_k):
    return [sys.executable, str(SCRIPT), "--shape", "llama-tiny", "--fill", "state", "--out",
            str(out), "--depths", str(depth), "--pools", "1", "--n-gen", "4", "--repeat", "1",
            "--type-k", type_k, "--device", "cpu"]


def test_resume_skips_only_the_same_rows(tmp_path):
    depth = int(np.random.default_rng().integers(600, 1500))
    run = lambda type_k: subprocess.run(_cmd(tmp_path, depth, type_k), capture_output=True,  # noqa: E731
                                        text=True, check=True)
    first, again, other = run("q8_0"), run("q8_0"), run("f16")
    assert first.stdout.count(f"depth={depth} ") == 2, first.stdout + first.stderr
    assert again.stdout.count(f"depth={depth} ") == 0, again.stdout
    assert again.stderr.count("skipped (already in") == 2, again.stderr
    assert other.stdout.count(f"depth={depth} ") == 2, other.stdout + other.stderr
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert sorted((r["type_k"], r["mode"]) for r in rows) == [
        ("f16", "pool 1 MiB"), ("f16", "resident"), ("q8_0", "pool 1 MiB"), ("q8_0", "resident")]
