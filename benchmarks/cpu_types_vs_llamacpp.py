"""CPU prefill and decode per weight type: pyllamakv beside llama.cpp's CPU build, interleaved.

For each weight type the CPU backend reads and each mix (tests/fixtures/synthetic.py
TYPES and MIXES) on a random-weight llama model (default shape llama-125m), and for
the default model (SmolLM2-135M-Instruct Q4_1, row "default"):

  pyllamakv  the Context API, as benchmarks/bench_cpu.py: a prefill of 512 random token
             ids into an empty cache (pp512), then 64 greedy decode steps after them, one
             token each (tg64 at depth 512); f16 K and V, n_ubatch 512, --threads threads
  llama.cpp  llama-bench -t THREADS -r 1 -o json: -p 512 -n 0 (pp512), then
             -p 0 -n 64 -d 512 (tg64 at depth 512); its defaults otherwise (f16 K and V,
             n_ubatch 512, flash attention auto, a warm-up run before each test)

The two engines alternate, A/B/A/B, for --rounds rounds per type (pyllamakv keeps its
model loaded between rounds, after one short warm-up); a row gives the median of the
rounds for each engine, their ratio (pyllamakv / llama.cpp), and the range of the
1-minute load average seen during the type's rounds. Rows go to --csv as they are
measured. The machine is shared: compare the ratios, not the absolute rates, between runs.

    python benchmarks/cpu_types_vs_llamacpp.py --llama-bench /work/llamacpp-cpu/bin/llama-bench \\
        [--types all|q4_0,q4_k,...,default] [--rounds 2] [--threads 2] [--csv out.csv]
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fixtures import synthetic as sm  # noqa: E402  (tests/fixtures/synthetic.py)

N_PROMPT, N_GEN = 512, 64


def pyllamakv_round(model, threads: int, n_prompt: int, n_gen: int) -> tuple[float, float]:
    """(pp t/s, tg t/s): bench_cpu.py's run (prefill of n_prompt tokens, then n_gen
    greedy steps after them) on random ids past the tiny vocabularies' specials."""
    from bench_cpu import one_run   # benchmarks/bench_cpu.py, beside this script
    prompt = np.random.default_rng(0).integers(300, model.n_vocab, n_prompt).tolist()
    pp, tg, _ = one_run(model, prompt, n_gen, threads, None)
    return pp, tg


def llama_bench(bench: str, path: Path, threads: int, args: list[str]) -> float:
    """avg_ts of one llama-bench test (-r 1)."""
    cmd = [bench, "-m", str(path), "-t", str(threads), "-r", "1", "-o", "json", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"llama-bench rc {p.returncode}: {p.stderr[-400:]}")
    return float(json.loads(p.stdout)[0]["avg_ts"])


def measure(path: Path, a, load: list[float]) -> dict:
    from pyllamakv.core.native import Model
    runs = {"py_pp": [], "py_tg": [], "ll_pp": [], "ll_tg": []}
    model = Model(path, n_threads=a.threads)
    try:
        pyllamakv_round(model, a.threads, 64, 4)                     # warm-up
        for _ in range(a.rounds):
            load.append(os.getloadavg()[0])
            pp, tg = pyllamakv_round(model, a.threads, N_PROMPT, N_GEN)
            runs["py_pp"].append(pp)
            runs["py_tg"].append(tg)
            if a.llama_bench:
                load.append(os.getloadavg()[0])
                runs["ll_pp"].append(llama_bench(a.llama_bench, path, a.threads,
                                                 ["-p", str(N_PROMPT), "-n", "0"]))
                runs["ll_tg"].append(llama_bench(a.llama_bench, path, a.threads,
                                                 ["-p", "0", "-n", str(N_GEN), "-d", str(N_PROMPT)]))
    finally:
        model.close()
    return runs


def row(name: str, path: Path, runs: dict, load: list[float]) -> dict:
    med = {k: statistics.median(v) if v else float("nan") for k, v in runs.items()}
    fmt = lambda v: ";".join(f"{x:.1f}" for x in v)   # noqa: E731
    return {"type": name, "mib": round(path.stat().st_size / 2**20, 1),
            "pyllamakv_pp512": round(med["py_pp"], 1), "llamacpp_pp512": round(med["ll_pp"], 1),
            "pp_ratio": round(med["py_pp"] / med["ll_pp"], 3),
            "pyllamakv_tg64_d512": round(med["py_tg"], 1), "llamacpp_tg64_d512": round(med["ll_tg"], 1),
            "tg_ratio": round(med["py_tg"] / med["ll_tg"], 3),
            "load1": f"{min(load):.2f}-{max(load):.2f}",
            "runs_pp": f"{fmt(runs['py_pp'])} / {fmt(runs['ll_pp'])}",
            "runs_tg": f"{fmt(runs['py_tg'])} / {fmt(runs['ll_tg'])}"}


def main() -> None:
    from gguf import GGMLQuantizationType as T
    from pyllamakv.default_model import default_model_path
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-bench", default="", help="llama.cpp's CPU llama-bench (empty: pyllamakv alone)")
    ap.add_argument("--shape", default="llama-125m", choices=sorted(sm.SHAPES))
    ap.add_argument("--types", default="all",
                    help="comma-separated weight types, mixes and 'default' (all: every type, the mixes, default)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dir", default="/tmp/cpu-types")
    ap.add_argument("--keep", action="store_true", help="keep the GGUF files")
    ap.add_argument("--csv", default="")
    a = ap.parse_args()
    names = a.types.split(",")
    if names == ["all"]:
        names = [t.name.lower() for t in sm.TYPES] + list(sm.MIXES) + ["default"]
    bad = [n for n in names if n not in sm.MIXES and n != "default" and n.upper() not in T.__members__]
    if bad:
        ap.error(f"unknown weight types or mixes: {bad}")
    os.makedirs(a.dir, exist_ok=True)
    rows: list[dict] = []
    cols = ("type", "mib", "pyllamakv_pp512", "llamacpp_pp512", "pp_ratio",
            "pyllamakv_tg64_d512", "llamacpp_tg64_d512", "tg_ratio", "load1")
    print(f"{a.shape}, {a.threads} threads, {a.rounds} rounds A/B; load average now "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    print(" ".join(f"{c:>20}" if i else f"{c:<12}" for i, c in enumerate(cols)), flush=True)
    for name in names:
        if name == "default":
            path, made = Path(default_model_path()), False
        else:
            path = Path(a.dir) / f"{a.shape}-{name}.gguf"
            made = not path.exists()
            if made:
                sm.write(sm.SHAPES[a.shape], path, name if name in sm.MIXES else T[name.upper()])
        load: list[float] = []
        try:
            r = row(name, path, measure(path, a, load), load)
        except Exception as e:   # noqa: BLE001 (a failed type is reported, the rest run)
            print(f"{name:<12} failed: {str(e)[-300:]}", flush=True)
            continue
        finally:
            if made and not a.keep:
                path.unlink()
        rows.append(r)
        print(" ".join(f"{r[c]!s:>20}" if i else f"{r[c]!s:<12}" for i, c in enumerate(cols)), flush=True)
        if a.csv:
            with open(a.csv, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)


if __name__ == "__main__":
    main()
