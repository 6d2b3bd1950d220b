"""CPU decode under contention: 1 and 2 threads, pyllamakv and llama.cpp, interleaved
in one run, beside competing processes.

    python benchmarks/bench_contention.py [MODEL] [-n 48] [-r 3] [--loads none,cpu2,mem2]
        [--llamacpp PATH/llama-bench] [--library LABEL=PATH/libllamakv.so ...]

Engines: pyllamakv with 1 and 2 threads, each a child process that keeps its
``Llama`` loaded (``--library`` adds another pair on another build of the core,
for an A/B of two builds in one run); with ``--llamacpp``, llama.cpp's
``llama-bench`` (tg of -n tokens, ``-t 1`` and ``-t 2``, the same GGUF), started
for each measurement. Loads, started by this script (so in its process group):
``none``; ``cpuK``: K processes spinning on integer arithmetic; ``memK``: K
processes copying a 256 MiB array with numpy (memory-bound: they compete for
memory bandwidth and the last-level cache). Each round runs every engine once,
in a rotated order so that drifting load hits all alike; a row is the median
of -r rounds of decode tokens per second (greedy, after a short prompt), with
the load average when the row was taken; the line under it gives each engine's
2 threads / 1 thread ratio per round (median and quartiles, and a 95%
bootstrap interval for the median), which drifting load does not move as much.
"""
import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fixtures.stats import paired  # noqa: E402  (tests/fixtures/stats.py)

PROMPT = "The history of the Roman Empire is long and"


def _spin(stop):
    x = 0
    while not stop.is_set():
        for i in range(100000):
            x = (x * 1103515245 + i) & 0xFFFFFFFF


def _stream(stop):
    import numpy as np
    a = np.ones(32 << 20)                # 256 MiB of float64
    b = np.empty_like(a)
    while not stop.is_set():
        np.copyto(b, a)


def start_load(name):
    if name == "none":
        return None, []
    kind, k = name[:3], int(name[3:] or 1)
    if kind not in ("cpu", "mem"):
        raise SystemExit(f"unknown load {name!r}: none, cpuK or memK")
    stop = mp.Event()
    procs = [mp.Process(target=_spin if kind == "cpu" else _stream, args=(stop,), daemon=True)
             for _ in range(k)]
    for p in procs:
        p.start()
    time.sleep(1.0)
    return stop, procs


# ---------------------------------------------------------------- engines

def serve(model: str, threads: int) -> None:
    """Child: load once, then for each line n on stdin decode n tokens and
    print the decode rate."""
    from pyllamakv import Llama
    llm = Llama(model, n_ctx=512, n_threads=threads, device="cpu")
    print("ready", flush=True)
    for line in sys.stdin:
        llm.reset()
        w, c = time.perf_counter(), time.process_time()
        llm(PROMPT, max_tokens=int(line), temperature=0)
        w, c = time.perf_counter() - w, time.process_time() - c
        print(llm.timings.decode_tps, c / w, flush=True)


class Ours:
    def __init__(self, model, threads, library=None):
        env = dict(os.environ)
        if library:
            env["PYLLAMAKV_LIBRARY"] = library
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", model, str(threads)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=env)
        if self.proc.stdout.readline().strip() != "ready":
            raise SystemExit("a pyllamakv engine failed to start")

    def __call__(self, n):
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        tps, self.cpu = map(float, self.proc.stdout.readline().split())
        return tps

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(30)


class LlamaBench:
    def __init__(self, exe, model, threads):
        self.cmd = [exe, "-m", model, "-p", "0", "-t", str(threads), "-r", "1", "-o", "json"]

    def __call__(self, n):
        out = subprocess.run(self.cmd + ["-n", str(n)], capture_output=True, text=True,
                             check=True).stdout
        return float(json.loads(out)[0]["avg_ts"])

    def close(self):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
    ap.add_argument("-n", type=int, default=48, help="decode tokens per measurement")
    ap.add_argument("-r", type=int, default=3, help="rounds per load (median)")
    ap.add_argument("--loads", default="none,cpu1,cpu2,mem1,mem2")
    ap.add_argument("--llamacpp", metavar="PATH", help="llama.cpp's llama-bench executable")
    ap.add_argument("--library", action="append", default=[], metavar="LABEL=PATH",
                    help="also pyllamakv on this build of the core")
    ap.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        return serve(a.serve[0], int(a.serve[1]))
    from pyllamakv.default_model import default_model_path
    model = a.model or default_model_path()
    engines = {}
    for label, lib in [("pyllamakv", None)] + [tuple(s.split("=", 1)) for s in a.library]:
        for t in (1, 2):
            engines[f"{label} {t}t"] = Ours(model, t, lib)
    if a.llamacpp:
        for t in (1, 2):
            engines[f"llama.cpp {t}t"] = LlamaBench(a.llamacpp, model, t)
    try:
        for run in engines.values():
            run(8)                                          # warm-up
        names = list(engines)
        print(f"{os.path.basename(model)}, -n {a.n}, median of {a.r} rounds; "
              f"{os.cpu_count()} CPUs")
        print(f"{'load':6s} {'loadavg':>7s} " + " ".join(f"{k:>15s}" for k in names))
        for load in a.loads.split(","):
            stop, procs = start_load(load)
            try:
                rates = {k: [] for k in names}
                for r in range(a.r):
                    order = names[r % len(names):] + names[:r % len(names)]
                    for k in order:
                        rates[k].append(engines[k](a.n))
            finally:
                if stop is not None:
                    stop.set()
                    for p in procs:
                        p.join(5)
            print(f"{load:6s} {os.getloadavg()[0]:7.1f} " +
                  " ".join(f"{statistics.median(v):11.1f} t/s" for v in rates.values()),
                  flush=True)
            print(f"{'':14s} 2t / 1t per round: " + paired(rates), flush=True)
    finally:
        for run in engines.values():
            run.close()


if __name__ == "__main__":
    main()
