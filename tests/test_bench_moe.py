"""benchmarks/bench_moe.py run as a script on the CPU with the tiny qwen35moe shape: it
writes the file, runs pyllamakv within the budget in a child, and hands llama-bench
(here a stand-in script that records its arguments) the n_cpu_moe the budget chose,
with the prefill and the decode-at-depth runs; the ratios are pyllamakv's figures over
the stand-in's; a budget that holds nothing is a row that names why."""
from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_moe.py"


def _run(tmp_path, *args):
    # the source tree's package only where a built library is named (as conftest.py does):
    # else the installed one (the tree's has no compiled core)
    root = [str(SCRIPT.parents[1])] if os.environ.get("PYLLAMAKV_LIBRARY") else []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        root + [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x]))
    out = tmp_path / "moe.csv"
    p = subprocess.run([sys.executable, str(SCRIPT), "--shape", "qwen35moe-tiny", "--device", "cpu",
                        "--dir", str(tmp_path), "--csv", str(out), *args],
                       capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    with open(out) as f:
        return list(csv.DictReader(f)), p.stdout


def test_script_beside_a_llama_bench(tmp_path):
    ts = float(np.random.default_rng().uniform(10, 1000))
    bench, log = tmp_path / "llama-bench", tmp_path / "args.txt"
    bench.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\n"
                     f"echo '[{{\"avg_ts\": {ts}, \"n_prompt\": 1, \"n_gen\": 0}}]'\n")
    bench.chmod(0o755)
    depth = int(np.random.default_rng().integers(64, 300))
    rows, out = _run(tmp_path, "--depths", str(depth), "--gen", "3", "--llama-bench", str(bench))
    assert len(rows) == 1, out
    r = rows[0]
    assert int(r["depth"]) == depth and r["n_cpu_moe"] == "0" and not r["notes"], r
    pp, tg = float(r["pyllamakv_pp_ts"]), float(r["pyllamakv_tg_ts"])
    assert pp > 0 and tg > 0 and float(r["llamacpp_pp_ts"]) == round(ts, 2)
    assert abs(float(r["pp_ratio"]) - pp / ts) < 1e-2 * pp / ts + 1e-3
    assert abs(float(r["tg_ratio"]) - tg / ts) < 1e-2 * tg / ts + 1e-3
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and all("-ncmoe 0 " in c and "-ctk q8_0" in c for c in calls)
    assert f"-p {depth} -n 0" in calls[0] and f"-p 0 -n 3 -d {depth}" in calls[1]
    assert not list(tmp_path.glob("*.gguf"))    # written here, removed after (no --keep)


def test_budget_too_small_is_a_row_saying_why(tmp_path):
    rows, _ = _run(tmp_path, "--depths", "128", "--gen", "2", "--no-llama", "--budget-mib", "8")
    assert len(rows) == 1 and "budget of 8.0 MiB" in rows[0]["notes"], rows
    assert rows[0]["pyllamakv_tg_ts"] == ""
