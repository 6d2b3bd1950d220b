"""Aggregate decode tokens/s of B sequences in one context (one decode call per
step, the weights read once for all B) against B one-sequence contexts stepped
in turn, on the CPU or CUDA, with or without a pool bound.

    python benchmarks/bench_multiseq.py [MODEL] [--device cpu] [-b 1,4,8] [-n 32]
        [--prompt 64] [--pool-mib N] [--threads 2]

Each sequence gets a random prompt of --prompt tokens, then -n decode steps of
one (random) token each; the figure is B * n / (seconds of the decode steps).
"""
import argparse
import time

import numpy as np

from pyllamakv._native import Context, Model
from pyllamakv.default_model import default_model_path


def run(model, b, n, prompt, pool, batched, threads):
    rng = np.random.default_rng(0)
    kw = dict(n_ctx=prompt + n + 8, n_batch=max(prompt, b), n_ubatch=max(prompt, b),
              kv_pool_bytes=pool, n_threads=threads)
    toks = rng.integers(0, model.n_vocab, (b, prompt + n))
    if batched:
        ctxs = [Context(model, n_seq_max=b, **kw)]
        for s in range(b):
            ctxs[0].decode_batch(toks[s, :prompt].tolist(), [s] * prompt)
        t0 = time.perf_counter()
        for i in range(n):
            ctxs[0].decode_batch(toks[:, prompt + i].tolist(), list(range(b)))
    else:
        ctxs = [Context(model, **kw) for _ in range(b)]
        for s, c in enumerate(ctxs):
            c.decode(toks[s, :prompt].tolist())
        t0 = time.perf_counter()
        for i in range(n):
            for s, c in enumerate(ctxs):
                c.decode([int(toks[s, prompt + i])])
    dt = time.perf_counter() - t0
    for c in ctxs:
        c.close()
    return b * n / dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("-b", default="1,4,8")
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--pool-mib", type=float)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    pool = None if a.pool_mib is None else int(a.pool_mib * (1 << 20))
    with Model(a.model or default_model_path(), a.device, a.threads) as m:
        for b in (int(x) for x in a.b.split(",")):
            one = run(m, b, a.n, a.prompt, pool, False, a.threads)
            many = run(m, b, a.n, a.prompt, pool, True, a.threads)
            print(f"B={b:3d}  contexts in turn {one:8.1f} tok/s   one context batched "
                  f"{many:8.1f} tok/s   x{many / one:.2f}")


if __name__ == "__main__":
    main()
