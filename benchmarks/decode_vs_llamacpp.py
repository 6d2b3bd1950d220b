"""Decode speed per weight type and mix: pyllamakv beside llama.cpp, same file, same GPU, one run.

For each weight type or mix (benchmarks/synthetic_model.py's TYPES and MIXES) on a
synthetic model of a real shape (default llama3-8b):

  pyllamakv  create_completion of --gen greedy tokens after a prompt of DEPTH random token
             ids, q8_0 K and V, the default CUDA kernels; decode t/s from llm.timings
             (the method of ../shared/tools/decode_rate.py), in a child process so that
             its GPU memory is free before llama.cpp runs; "wall": the completion's
             tokens after the first over its wall-clock time after the prefill
  llama.cpp  llama-bench -m FILE -ngl 99 -fa 1 -ctk q8_0 -ctv q8_0 -p 0 -n 64 -d DEPTH
             (tg64 at that depth), avg_ts of its repetitions (-r, default 3)

and prints their ratio. Where llama-bench is not there yet (built in the background by
tools/gpu-run.sh's llref stage), pyllamakv is measured first and the file kept (at most
--max-queue-gib) until llama-bench appears. The file is written on the machine that runs this (and deleted
after, unless --keep), so a large shape's types are measured one at a time. With
--deadline the types not reached in time are listed as skipped. Results also go to
--csv.

usage (GPU machine):
  python benchmarks/decode_vs_llamacpp.py --llama-bench /tmp/ref/llama-bench \\
      --types q4_0,q4_k,iq4_xs,q4_k_m --depths 512,32768 --dir /tmp/syn --csv out.csv
  python benchmarks/decode_vs_llamacpp.py --no-llama ...   # pyllamakv alone
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent / "tests"))   # tests/fixtures


def _child(path: str, depth: int, gen: int) -> None:
    """In the child: one Llama, a warm-up, the timed completion; prints one JSON line."""
    import numpy as np
    from pyllamakv import Llama
    llm = Llama(path, n_ctx=depth + gen + 64, n_batch=4096, type_k="q8_0", type_v="q8_0",
                device="cuda", verbose=False)
    toks = np.random.default_rng(0).integers(300, 30000, depth).tolist()
    llm.create_completion(toks[:16], max_tokens=4, temperature=0)
    t0 = time.perf_counter()
    r = llm.create_completion(toks, max_tokens=gen, temperature=0, logit_bias={}, stop=[])
    wall = time.perf_counter() - t0
    t = llm.timings
    ct = r["usage"]["completion_tokens"]
    print(json.dumps({"decode_ts": t.decode_tokens / max(t.decode_s, 1e-9), "decode_tokens": t.decode_tokens,
                      "wall_ts": (ct - 1) / max(wall - t.prefill_s, 1e-9),
                      "prefill_s": t.prefill_s, "sample_s": t.sample_s, "wall_s": wall,
                      "completion_tokens": r["usage"]["completion_tokens"]}), flush=True)
    llm.close()


def pyllamakv_decode(path: Path, depth: int, gen: int, timeout: float) -> dict:
    p = subprocess.run([sys.executable, __file__, "--child", str(path), str(depth), str(gen)],
                       capture_output=True, text=True, timeout=timeout)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"pyllamakv run failed (rc {p.returncode}): {p.stderr[-800:]}")


def llama_decode(bench: str, path: Path, depth: int, reps: int, timeout: float) -> float:
    cmd = [bench, "-m", str(path), "-ngl", "99", "-fa", "1", "-ctk", "q8_0", "-ctv", "q8_0",
           "-p", "0", "-n", "64", "-d", str(depth), "-r", str(reps), "-o", "json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"llama-bench rc {p.returncode}: {p.stderr[-800:]}")
    rows = json.loads(p.stdout)
    tg = [r for r in rows if r.get("n_gen", 0) > 0]
    return float(tg[0]["avg_ts"])


def main() -> None:
    from fixtures import synthetic as sm
    from gguf import GGMLQuantizationType as T
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="llama3-8b", choices=sorted(sm.SHAPES))
    ap.add_argument("--types", default="q4_0,q8_0,q4_k,iq4_xs",
                    help="comma-separated weight types and mixes (all: every quantized type, then the mixes)")
    ap.add_argument("--depths", default="512")
    ap.add_argument("--gen", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3, help="llama-bench repetitions")
    ap.add_argument("--llama-bench", default="", help="path of llama-bench (empty: pyllamakv alone)")
    ap.add_argument("--no-llama", action="store_true")
    ap.add_argument("--dir", default="/tmp/syn")
    ap.add_argument("--keep", action="store_true", help="keep the GGUF files")
    ap.add_argument("--csv", default="")
    ap.add_argument("--deadline", type=float, default=0, help="seconds from start; 0: none")
    ap.add_argument("--max-queue-gib", type=float, default=24,
                    help="files kept for a llama-bench still being built: at most this many GiB")
    a = ap.parse_args()
    t_start = time.monotonic()
    names = a.types.split(",")
    if names == ["all"]:
        names = [t.name.lower() for t in sm.TYPES if t not in sm.FLOATS] + list(sm.MIXES)
    bad = [n for n in names if n not in sm.MIXES and n.upper() not in T.__members__]
    if bad:
        ap.error(f"unknown weight types or mixes: {bad}")
    depths = [int(d) for d in a.depths.split(",")]
    shape = sm.SHAPES[a.shape]
    os.makedirs(a.dir, exist_ok=True)
    use_llama = bool(a.llama_bench) and not a.no_llama
    rows: list[dict] = []
    queued: list[tuple[dict, Path]] = []   # rows waiting for llama-bench (built meanwhile)
    left = lambda: a.deadline - (time.monotonic() - t_start) if a.deadline else 1e9   # noqa: E731
    have_llama = lambda: os.access(a.llama_bench, os.X_OK)   # noqa: E731

    def save() -> None:
        if a.csv and rows:
            with open(a.csv, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)

    def show(r: dict) -> None:
        print(f"{r['type']:<12}{r['gib']:>6.2f}{r['depth']:>7}{r['pyllamakv_ts']:>11.1f}{r['llamacpp_ts']:>11.1f}"
              f"{r['ratio']:>7.2f}{r['pyllamakv_wall_ts']:>9.1f}  {r['notes']}", flush=True)

    def measure_llama(r: dict, path: Path) -> None:
        try:
            r["llamacpp_ts"] = round(llama_decode(a.llama_bench, path, r["depth"], a.reps,
                                                  timeout=max(30.0, min(600.0, left()))), 2)
            r["ratio"] = round(r["pyllamakv_ts"] / r["llamacpp_ts"], 3)
        except Exception as e:   # noqa: BLE001 (a failed type is reported, the rest run)
            r["notes"] += f"; llama.cpp: {str(e)[-200:]!r}"

    def wait_llama(until_left: float) -> bool:
        while not have_llama() and left() > until_left:
            time.sleep(5)
        return have_llama()

    def drain() -> None:
        paths = {}
        for r, path in queued:
            if left() > 20:
                measure_llama(r, path)
            show(r)
            paths[path] = True
        queued.clear()
        save()
        for path in paths:
            if not a.keep:
                path.unlink(missing_ok=True)

    print(f"{'type':<12}{'GiB':>6}{'depth':>7}{'pyllamakv':>11}{'llama.cpp':>11}{'ratio':>7}{'wall':>9}  notes",
          flush=True)
    for name in names:
        if left() < 30:
            print(f"{name:<12} skipped: deadline", flush=True)
            continue
        if use_llama and queued and (have_llama() or sum(p.stat().st_size for _, p in queued) / 2**30 > a.max_queue_gib):
            if wait_llama(60):
                drain()
        qtype = name if name in sm.MIXES else T[name.upper()]
        path = Path(a.dir) / f"{a.shape}-{name}.gguf"
        t0 = time.monotonic()
        if not path.exists():
            sm.write(shape, path, qtype)
        gib = path.stat().st_size / 2**30
        made = time.monotonic() - t0
        waiting = False
        for depth in depths:
            r = {"type": name, "gib": round(gib, 3), "depth": depth, "pyllamakv_ts": float("nan"),
                 "llamacpp_ts": float("nan"), "ratio": float("nan"), "pyllamakv_wall_ts": float("nan"),
                 "notes": f"file {made:.0f}s"}
            try:
                o = pyllamakv_decode(path, depth, a.gen, timeout=max(30.0, min(600.0, left())))
                r["pyllamakv_ts"] = round(o["decode_ts"], 2)
                r["pyllamakv_wall_ts"] = round(o["wall_ts"], 2)
                if o["completion_tokens"] != a.gen:
                    r["notes"] += f"; {o['completion_tokens']} tokens"
            except Exception as e:   # noqa: BLE001
                r["notes"] += f"; pyllamakv: {str(e)[-200:]!r}"
            rows.append(r)
            if use_llama and have_llama():
                measure_llama(r, path)
            elif use_llama:
                queued.append((r, path))
                waiting = True
            show(r)
            save()
        if not waiting and not a.keep:
            path.unlink()
    if queued:
        wait_llama(30)
        print("-- llama.cpp for the types measured before llama-bench was there:", flush=True)
        drain()
    print("-- all:", flush=True)
    for r in rows:
        show(r)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
