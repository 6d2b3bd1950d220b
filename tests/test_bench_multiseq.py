"""benchmarks/bench_multiseq.py on the CPU with a tiny synthetic shape: the three
ways of filling the sequences (tests/fixtures/multiseq_fill.py) leave the same
caches (the state and copy fills stand in for prefilling every sequence); run
as a script, a smoke run writes its CSV with the reference and in-turn
columns, and --deadline stops cleanly."""
from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fixtures import batched_ref as ref
from fixtures import synthetic as sm
from fixtures.multiseq_fill import fill
from pyllamakv.core.native import Context, Model

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_multiseq.py"


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    seed = int(np.random.default_rng().integers(1 << 30))
    return sm.write(sm.SHAPES["llama-tiny"], tmp_path_factory.mktemp("ms") / "t.gguf", seed=seed)


def test_fills_leave_equal_caches(path):
    rng = np.random.default_rng()
    b, p = int(rng.integers(2, 5)), int(rng.integers(20, 300))
    toks = rng.integers(0, 512, p)
    blobs = {}
    with Model(path) as m:
        for how in ("prefill", "copy", "state"):
            with Context(m, n_ctx=p + 4, n_batch=64, n_ubatch=32, n_threads=2, type_k="q8_0",
                         type_v="q8_0", n_seq_max=b) as c:
                fill(c, b, toks, how, 64, None)
                assert [c.seq_n_tokens(s) for s in range(b)] == [p] * b
                blobs[how] = [c.seq_state_get(s) for s in range(b)]
    first = blobs["prefill"][0]
    for how, bl in blobs.items():
        assert all(x == first for x in bl), f"--fill {how}: a sequence's cache differs"


def _run(tmp_path, *args):
    """The benchmark run as a script; its CSV's rows."""
    subprocess.run([sys.executable, str(SCRIPT), "--threads", "2", "--out", str(tmp_path), *args],
                   check=True, capture_output=True, text=True, timeout=600)
    with (tmp_path / "multiseq.csv").open() as f:
        return list(csv.DictReader(f))


def test_smoke_run_writes_rows_with_references(path, tmp_path):
    rows = _run(tmp_path, "--model", str(path), "-b", "1,3", "-n", "2", "--prompt", "40",
                "--pool-mib", "resident,1", "--fill", "state", "--ref", "1=10,3=20", "--in-turn")
    assert [(r["pool_mib"], r["b"], r["status"]) for r in rows] == [
        ("resident", "1", "ok"), ("resident", "3", "ok"), ("1.0", "1", "ok"), ("1.0", "3", "ok")]
    for r in rows:
        assert float(r["decode_tps"]) > 0 and r["n"] == "2" and float(r["in_turn_tps"]) > 0
        ref = {"1": 10.0, "3": 20.0}[r["b"]]
        assert float(r["ref_tps"]) == ref
        assert float(r["ratio"]) == pytest.approx(float(r["decode_tps"]) / ref, rel=1e-2)


def test_deadline_skips_cleanly(path, tmp_path):
    rows = _run(tmp_path, "--model", str(path), "-b", "1,2", "-n", "2", "--prompt", "16",
                "--deadline", "0")
    assert [r["status"] for r in rows] == ["skipped (deadline)"] * 2


def test_references(tmp_path):
    refs, src = ref.load_refs(None, ("llama3-8b", "q4_0", "q8_0", "q8_0", 4096))
    assert ref.ref_for(refs, 4096, 32) == 1150.1 and ref.ref_for(refs, 32768, 32) is None
    assert ref.load_refs(None, ("llama3-8b", "q4_0", "f16", "f16", 4096)) == ({}, "")
    (tmp_path / "r.jsonl").write_text('main: loading\n{"pp": 4096, "tg": 64, "pl": 4, '
                                      '"speed_tg": 584.2}\n')
    refs, _ = ref.load_refs(str(tmp_path / "r.jsonl"), None)
    assert ref.ref_for(refs, 4096, 4) == 584.2 and ref.ref_for(refs, 8192, 4) is None
    (tmp_path / "r.md").write_text(
        "main: n_kv_max = 1000\n\n"
        "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s "
        "|    S t/s |\n|-------|--------|------|--------|----------|----------|----------|"
        "----------|----------|----------|\n"
        "|  32768 |     32 |   16 |  33000 |    5.000 |  6553.60 |    1.000 |   512.00 |    6.000 "
        "|  5546.67 |\n")
    refs, _ = ref.load_refs(str(tmp_path / "r.md"), None)
    assert refs == {(32768, 16): 512.0}
    with pytest.raises(SystemExit, match="--ref"):
        ref.load_refs("four=1", None)
