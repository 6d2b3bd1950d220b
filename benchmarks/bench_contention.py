"""CPU decode under contention: 1 and 2 threads (and llama.cpp when llama_cpp is
installed), interleaved in one run, beside competing processes.

    python benchmarks/bench_contention.py [MODEL] [-n 64] [-r 3] [--loads none,cpu2,mem1]

Loads: ``none``; ``cpuK``: K processes spinning on arithmetic; ``memK``: K
processes streaming a 256 MiB array through numpy (memory-bound). For each load
the engines run in turn (1 thread, 2 threads, llama.cpp 1 and 2), -r rounds,
interleaved so that drifting load hits all alike; decode tokens per second are
the median of the rounds (greedy, after a 64-token prompt).
"""
import argparse
import multiprocessing as mp
import statistics
import time


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
    stop = mp.Event()
    procs = [mp.Process(target=_spin if kind == "cpu" else _stream, args=(stop,), daemon=True)
             for _ in range(k)]
    for p in procs:
        p.start()
    time.sleep(1.0)
    return stop, procs


def ours(model, threads):
    from pyllamakv import Llama
    llm = Llama(model, n_ctx=512, n_threads=threads, device="cpu")

    def run(n):
        llm.reset()
        llm("The history of the Roman Empire is long and", max_tokens=n, temperature=0)
        return llm.timings.decode_tps
    return run


def theirs(model, threads):
    import llama_cpp
    llm = llama_cpp.Llama(model, n_ctx=512, n_threads=threads, verbose=False)

    def run(n):
        llm.reset()
        t0 = time.perf_counter()
        out = llm("The history of the Roman Empire is long and", max_tokens=n, temperature=0)
        # llama-cpp-python reports no split: time the whole call, minus a prefill run
        total = time.perf_counter() - t0
        t1 = time.perf_counter()
        llm.reset()
        llm("The history of the Roman Empire is long and", max_tokens=1, temperature=0)
        pre = time.perf_counter() - t1
        return (out["usage"]["completion_tokens"] - 1) / max(total - pre, 1e-9)
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--loads", default="none,cpu1,cpu2,mem1,mem2")
    a = ap.parse_args()
    from pyllamakv.default_model import default_model_path
    model = a.model or default_model_path()
    engines = {"pyllamakv 1t": ours(model, 1), "pyllamakv 2t": ours(model, 2)}
    try:
        engines["llama.cpp 1t"] = theirs(model, 1)
        engines["llama.cpp 2t"] = theirs(model, 2)
    except ImportError:
        print("(llama_cpp not installed: pyllamakv only)")
    for run in engines.values():
        run(8)                                          # warm-up
    print(f"{'load':6s} " + " ".join(f"{k:>14s}" for k in engines))
    for load in a.loads.split(","):
        stop, procs = start_load(load)
        try:
            rates = {k: [] for k in engines}
            for _ in range(a.r):
                for k, run in engines.items():
                    rates[k].append(run(a.n))
        finally:
            if stop is not None:
                stop.set()
                for p in procs:
                    p.join(5)
        print(f"{load:6s} " + " ".join(f"{statistics.median(v):10.1f} t/s" for v in rates.values()),
              flush=True)


if __name__ == "__main__":
    main()
