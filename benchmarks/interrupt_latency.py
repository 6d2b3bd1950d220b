"""How fast a long prefill answers Ctrl-C, and what the guard costs per token.

    python benchmarks/interrupt_latency.py [--tokens 1536] [--tries 5]

Prefills `tokens` random ids in one eval (n_batch = tokens) on the default
model, interrupts it (``_thread.interrupt_main``) at a random point, and
prints the seconds from the interrupt to the KeyboardInterrupt reaching the
caller; then the decode time per token (the guard and the C-derived
bookkeeping are on that path).
"""
from __future__ import annotations

import _thread
import argparse
import threading
import time

import numpy as np

from pyllamakv import Llama


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=1536)
    ap.add_argument("--tries", type=int, default=5)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    with Llama(None, n_ctx=a.tokens + 64, n_batch=a.tokens, n_ubatch=512) as llm:
        toks = [int(t) for t in rng.integers(100, 40000, a.tokens)]
        t0 = time.perf_counter()
        llm.eval(toks)
        full = time.perf_counter() - t0
        print(f"prefill of {a.tokens} tokens: {full:.2f} s")
        lat = []
        for _ in range(a.tries):
            llm.reset()
            at: list[float] = []
            timer = threading.Timer(rng.uniform(0.1, 0.8) * full,
                                    lambda: (at.append(time.perf_counter()),
                                             _thread.interrupt_main()))
            timer.start()
            try:
                llm.eval(toks)
                time.sleep(60)
            except KeyboardInterrupt:
                lat.append(time.perf_counter() - at[0])
            timer.join()
        print(f"interrupt answered in: median {np.median(lat):.3f} s, max {max(lat):.3f} s "
              f"({len(lat)} tries)")
        llm.reset()
        llm.eval(toks[:16])
        t0 = time.perf_counter()
        for t in toks[16:80]:
            llm.eval([t])
        print(f"decode: {(time.perf_counter() - t0) / 64 * 1e3:.2f} ms/token")


if __name__ == "__main__":
    main()
