"""MoE prefill and decode within a GPU memory budget: pyllamakv beside llama.cpp's
--n-cpu-moe, on the same file, in the same run.

The file: a synthetic Qwen3.5-35B-A3B (tests/fixtures/synthetic.py's qwen35moe-35b-a3b:
the published shape, Q4_K_M-class weights by default; random weights: speed only),
written on the machine that runs this unless --model names one. At each depth D
(--depths, default 8K..256K):

  pyllamakv  Llama(FILE, n_ctx=D + gen + 64, gpu_memory_mib=--budget-mib (16384),
             type_k/type_v q8_0, device=cuda): the budget chooses n_cpu_moe (the fewest
             layers whose routed experts stay in host memory) and the KV pool, which
             streams where the cache does not fit; then create_completion of --gen greedy
             tokens after D random token ids: prefill t/s = D / timings.prefill_s, decode
             t/s = timings.decode_tokens / timings.decode_s. In a child process, so that its
             GPU memory is free before llama.cpp runs.
  llama.cpp  llama-bench -m FILE -ngl 99 -fa 1 -ctk q8_0 -ctv q8_0 -ncmoe N, once with
             -p D -n 0 (prefill) and once with -p 0 -n gen -d D (decode at depth D); N is
             what pyllamakv chose at that depth (--llama-ncmoe: a fixed N instead), so the
             same experts stay on the host; its whole KV cache is on the GPU.

The GPU's memory use is polled (nvidia-smi) during each run; "peak" is the most it
rose above the idle figure. Both include a CUDA context, which gpu_memory_mib leaves
out (memory/budget.py), so a run fits the budget when its peak is at most
--budget-mib + --context-mib. Ratios (pyllamakv / llama.cpp) are printed where both
fit; elsewhere the row says which did not. Depths not reached before --deadline are
listed as skipped. Results also go to --csv.

usage (GPU machine; tools/gpu-run.sh's stage "moe"; MoE models on CUDA are opt-in until
their GPU check has passed, hence the variable):
  python benchmarks/bench_moe.py --llama-bench /tmp/ref/llama-bench \
      --csv moe.csv
  python benchmarks/bench_moe.py --shape qwen35moe-tiny --device cpu --depths 256,512 \\
      --no-llama    # a CPU smoke run of the script itself
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent / "tests"))   # tests/fixtures

FIELDS = ["depth", "n_cpu_moe", "kv_pool_mib", "n_ubatch", "pyllamakv_pp_ts", "llamacpp_pp_ts",
          "pp_ratio", "pyllamakv_tg_ts", "llamacpp_tg_ts", "tg_ratio", "pyllamakv_peak_mib",
          "llamacpp_peak_mib", "notes"]


# ---------------------------------------------------------------- pyllamakv (child)

def _child(path: str, depth: int, gen: int, budget: float, device: str, kv: str) -> None:
    """One Llama within the budget, a warm-up, the timed completion; one JSON line."""
    import numpy as np
    from pyllamakv import Llama
    llm = Llama(path, n_ctx=depth + gen + 64, n_batch=4096, type_k=kv, type_v=kv,
                device=device, gpu_memory_mib=budget)
    hi = min(llm.n_vocab(), 30000)
    toks = np.random.default_rng(0).integers(300, hi, depth).tolist()
    llm.create_completion(toks[:16], max_tokens=2, temperature=0)
    llm.reset()
    r = llm.create_completion(toks, max_tokens=gen, temperature=0, stop=[])
    t = llm.timings
    pool = llm.kv_pool_bytes
    print(json.dumps({
        "pp_ts": depth / max(t.prefill_s, 1e-9), "tg_ts": t.decode_tokens / max(t.decode_s, 1e-9),
        "completion_tokens": r["usage"]["completion_tokens"], "n_cpu_moe": llm.memory.n_cpu_moe,
        "kv_pool_mib": None if pool is None else round(pool / 2**20, 1),
        "n_ubatch": llm.engine.ctx.n_ubatch, "budget": llm.memory.describe()}), flush=True)
    llm.close()


# ---------------------------------------------------------------- GPU memory

class PeakMemory:
    """The most the GPU's used memory (MiB, nvidia-smi) rose above its figure at start,
    polled every 0.2 s while the block runs; None where there is no nvidia-smi."""

    def __init__(self) -> None:
        self.ok = shutil.which("nvidia-smi") is not None
        self.peak: float | None = None

    @staticmethod
    def used() -> float:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                              "-i", "0"], capture_output=True, text=True, timeout=10).stdout
        return float(out.split()[0])

    def __enter__(self) -> "PeakMemory":
        if self.ok:
            self.idle = self.used()
            self.peak, self._stop = 0.0, threading.Event()
            self._t = threading.Thread(target=self._poll, daemon=True)
            self._t.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self.peak = max(self.peak, self.used() - self.idle)
            except (OSError, ValueError, subprocess.SubprocessError):
                pass

    def __exit__(self, *exc) -> None:
        if self.ok:
            self._stop.set()
            self._t.join()


def run_pyllamakv(a, path: Path, depth: int, timeout: float) -> tuple[dict, float | None]:
    cmd = [sys.executable, __file__, "--child", str(path), str(depth), str(a.gen),
           str(a.budget_mib), a.device, a.kv]
    with PeakMemory() as mem:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line), mem.peak
    raise RuntimeError(f"pyllamakv rc {p.returncode}: {p.stderr[-600:]}")


# ---------------------------------------------------------------- llama.cpp

def run_llama(a, path: Path, depth: int, ncmoe: int, timeout: float) -> tuple[float, float, float | None]:
    """(prefill t/s, decode t/s at depth, peak MiB) from llama-bench with -ncmoe."""
    base = [a.llama_bench, "-m", str(path), "-ngl", "99", "-fa", "1", "-ctk", a.kv, "-ctv", a.kv,
            "-ncmoe", str(ncmoe), "-r", str(a.reps), "-o", "json"]
    end = time.monotonic() + timeout
    out = []
    with PeakMemory() as mem:
        for args in (["-p", str(depth), "-n", "0"], ["-p", "0", "-n", str(a.gen), "-d", str(depth)]):
            p = subprocess.run(base + args, capture_output=True, text=True,
                               timeout=max(10.0, end - time.monotonic()))
            if p.returncode != 0:
                raise RuntimeError(f"llama-bench rc {p.returncode}: {p.stderr[-600:]}")
            out.append(float(json.loads(p.stdout)[0]["avg_ts"]))
    return out[0], out[1], mem.peak


# ---------------------------------------------------------------- the run

def main() -> None:
    from fixtures import synthetic as sm
    from gguf import GGMLQuantizationType as T
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="", help="an existing GGUF (default: write --shape)")
    ap.add_argument("--shape", default="qwen35moe-35b-a3b",
                    choices=sorted(k for k, v in sm.SHAPES.items() if isinstance(v, sm.Qwen35MoeShape)))
    ap.add_argument("--type", default="q4_k_m", help="weight type or mix of the written file")
    ap.add_argument("--dir", default="/tmp/syn")
    ap.add_argument("--keep", action="store_true", help="keep the written file")
    ap.add_argument("--depths", default="8192,32768,65536,131072,262144")
    ap.add_argument("--gen", type=int, default=32, help="decoded tokens per depth")
    ap.add_argument("--budget-mib", type=float, default=16384)
    ap.add_argument("--context-mib", type=float, default=512,
                    help="the CUDA context's allowance beside the budget when judging a fit")
    ap.add_argument("--kv", default="q8_0", help="K and V type, both engines")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--llama-bench", default="", help="path of llama-bench (empty: pyllamakv alone)")
    ap.add_argument("--no-llama", action="store_true")
    ap.add_argument("--llama-ncmoe", default="same",
                    help="llama-bench's -ncmoe: 'same' (pyllamakv's choice at each depth) or N")
    ap.add_argument("--reps", type=int, default=1, help="llama-bench repetitions")
    ap.add_argument("--csv", default="")
    ap.add_argument("--deadline", type=float, default=0, help="seconds from start; 0: none")
    a = ap.parse_args()
    t_start = time.monotonic()
    left = lambda: a.deadline - (time.monotonic() - t_start) if a.deadline else 1e9   # noqa: E731
    use_llama = bool(a.llama_bench) and not a.no_llama
    if use_llama and not os.access(a.llama_bench, os.X_OK):
        ap.error(f"--llama-bench {a.llama_bench}: not an executable (or use --no-llama)")
    if a.llama_ncmoe != "same" and not a.llama_ncmoe.isdigit():
        ap.error(f"--llama-ncmoe must be 'same' or a number of layers, not {a.llama_ncmoe!r}")

    path, wrote = Path(a.model), False
    if not a.model:
        path = Path(a.dir) / f"{a.shape}-{a.type}.gguf"
        if not path.exists():
            qtype = a.type if a.type in sm.MIXES else T[a.type.upper()]
            os.makedirs(a.dir, exist_ok=True)
            t0 = time.monotonic()
            sm.write(sm.SHAPES[a.shape], path, qtype)
            wrote = True
            print(f"wrote {path} ({path.stat().st_size / 2**30:.2f} GiB) in "
                  f"{time.monotonic() - t0:.0f} s", flush=True)
    fits = lambda peak: peak is None or peak <= a.budget_mib + a.context_mib   # noqa: E731
    rows: list[dict] = []

    def save() -> None:
        if a.csv and rows:
            with open(a.csv, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=FIELDS)
                w.writeheader()
                w.writerows(rows)

    f = lambda x, w=9: f"{x:>{w}.1f}" if isinstance(x, (int, float)) else f"{'-':>{w}}"   # noqa: E731
    g = lambda x: f"{x:>7.2f}" if isinstance(x, float) else f"{'-':>7}"   # noqa: E731
    print(f"budget {a.budget_mib:.0f} MiB (+{a.context_mib:.0f} MiB CUDA context), {a.kv} KV, "
          f"{path.name}", flush=True)
    print(f"{'depth':>7}{'ncmoe':>6}{'pool':>9}{'pp pyl':>9}{'pp l.cpp':>9}{'ratio':>7}"
          f"{'tg pyl':>9}{'tg l.cpp':>9}{'ratio':>7}{'peak pyl':>9}{'peak l.c':>9}  notes", flush=True)
    for depth in [int(d) for d in a.depths.split(",")]:
        if left() < 30:
            print(f"{depth:>7} skipped: deadline", flush=True)
            continue
        r = dict.fromkeys(FIELDS)
        r.update(depth=depth, notes="")
        try:
            o, peak = run_pyllamakv(a, path, depth, timeout=max(30.0, min(1800.0, left())))
            r.update(n_cpu_moe=o["n_cpu_moe"], kv_pool_mib=o["kv_pool_mib"], n_ubatch=o["n_ubatch"],
                     pyllamakv_pp_ts=round(o["pp_ts"], 2), pyllamakv_tg_ts=round(o["tg_ts"], 2),
                     pyllamakv_peak_mib=peak)
            if o["completion_tokens"] != a.gen:
                r["notes"] += f"{o['completion_tokens']} tokens; "
            if not fits(peak):
                r["notes"] += "pyllamakv over budget; "
        except Exception as e:   # noqa: BLE001 (a failed depth is reported, the rest run)
            r["notes"] += f"pyllamakv: {str(e)[-400:]!r}; "
        ncmoe = r["n_cpu_moe"] if a.llama_ncmoe == "same" else int(a.llama_ncmoe)
        if use_llama and ncmoe is not None and left() > 30:
            try:
                pp, tg, peak = run_llama(a, path, depth, ncmoe, timeout=max(30.0, min(1800.0, left())))
                r.update(llamacpp_pp_ts=round(pp, 2), llamacpp_tg_ts=round(tg, 2),
                         llamacpp_peak_mib=peak)
                if not fits(peak):
                    r["notes"] += "llama.cpp over budget; "
                elif r["pyllamakv_pp_ts"] is not None and fits(r["pyllamakv_peak_mib"]):
                    r["pp_ratio"] = round(r["pyllamakv_pp_ts"] / pp, 3)
                    r["tg_ratio"] = round(r["pyllamakv_tg_ts"] / tg, 3)
            except Exception as e:   # noqa: BLE001
                r["notes"] += f"llama.cpp (-ncmoe {ncmoe}): {str(e)[-400:]!r}; "
        rows.append(r)
        save()
        print(f"{depth:>7}{r['n_cpu_moe'] if r['n_cpu_moe'] is not None else '-':>6}"
              f"{f(r['kv_pool_mib'])}{f(r['pyllamakv_pp_ts'])}{f(r['llamacpp_pp_ts'])}"
              f"{g(r['pp_ratio'])}{f(r['pyllamakv_tg_ts'])}{f(r['llamacpp_tg_ts'])}{g(r['tg_ratio'])}"
              f"{f(r['pyllamakv_peak_mib'])}{f(r['llamacpp_peak_mib'])}  {r['notes']}", flush=True)
    if wrote and not a.keep:
        path.unlink(missing_ok=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), sys.argv[6],
               sys.argv[7])
    else:
        main()
