"""CPU speed on the default model against llama.cpp's figures (BENCHMARKS.md).

Prefill of 512 tokens from an empty cache, then decode of 128 tokens after
them (greedy), SmolLM2-135M-Instruct Q4_1, 2 threads; one warm-up run, then
the median of --repetitions runs.

    python benchmarks/bench_cpu.py [--threads 2] [--repetitions 3] [--kv-pool-mib N]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from pyllamakv.core.native import Context, Model
from pyllamakv.default_model import default_model_path

LLAMA_CPP = {"prefill": 187.0, "decode": 78.0}   # t/s, same machine kind, 2 threads


def one_run(model, prompt, n_gen, threads, pool_bytes):
    c = Context(model, n_ctx=len(prompt) + n_gen + 8, n_batch=512, n_ubatch=512,
                n_threads=threads, kv_pool_bytes=pool_bytes)
    t0 = time.perf_counter()
    c.decode(prompt)
    t_pp = time.perf_counter() - t0
    tok = int(np.argmax(c.logits()[-1]))
    t0 = time.perf_counter()
    for _ in range(n_gen):
        c.decode([tok])
        tok = int(np.argmax(c.logits()[-1]))
    t_tg = time.perf_counter() - t0
    stats = c.kv_stats()
    c.close()
    return len(prompt) / t_pp, n_gen / t_tg, stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("--kv-pool-mib", type=float, default=None)
    a = ap.parse_args()
    pool = None if a.kv_pool_mib is None else int(a.kv_pool_mib * 2**20)
    model = Model(default_model_path(), n_threads=a.threads)
    prompt = np.random.default_rng(0).integers(0, model.n_vocab, a.n_prompt).tolist()
    one_run(model, prompt, 8, a.threads, pool)                       # warm-up
    runs = [one_run(model, prompt, a.n_gen, a.threads, pool) for _ in range(a.repetitions)]
    pp = statistics.median(r[0] for r in runs)
    tg = statistics.median(r[1] for r in runs)
    print(f"SmolLM2-135M-Instruct Q4_1, CPU, {a.threads} threads, KV f16/f16, "
          f"pool {'all resident' if pool is None else f'{a.kv_pool_mib} MiB'}")
    print("| test | t/s (median of %d) | runs | llama.cpp | ratio |" % a.repetitions)
    print("|---|---|---|---|---|")
    for name, v, idx in (("prefill pp%d" % a.n_prompt, pp, 0), ("decode tg%d" % a.n_gen, tg, 1)):
        ref = LLAMA_CPP["prefill" if idx == 0 else "decode"]
        print(f"| {name} | {v:.1f} | {', '.join(f'{r[idx]:.1f}' for r in runs)} | {ref:.0f} "
              f"| {v / ref:.2f}x |")
    if pool is not None:
        s = runs[-1][2]
        print(f"streamed {s['bytes_streamed'] / 2**20:.1f} MiB in all, "
              f"resident chunks per layer {s['resident_chunks'][0]}, copy waits {s['copy_waits']}")


if __name__ == "__main__":
    main()
