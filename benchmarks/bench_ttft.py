"""Time to first token through the public Llama API: a prompt of N random tokens
read by ``Llama.eval`` (prefill) from an empty cache, then 16 single-token
decodes after it; per configuration, one CSV line per run.

A configuration is ``budget:MIB`` (``gpu_memory_mib=MIB``: the library sizes
the pool and chooses n_ubatch) or ``resident:UB`` (the whole cache on the card,
n_ubatch UB). The chosen n_ubatch, the bytes streamed and the card's memory in
use (NVML, where pynvml is present) are printed beside the times.

    python benchmarks/bench_ttft.py MODEL.gguf --lengths 32768,131072 \
        --configs budget:16384,resident:4096 --type-k q8_0 --type-v q4_0
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from pyllamakv import Llama


def _nvml_used():
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return lambda: pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**20
    except Exception:           # no NVML here: the column reads nan
        return lambda: float("nan")


def _kwargs(config: str, n: int, a) -> dict:
    kind, _, value = config.partition(":")
    kw = dict(n_ctx=n + 64, n_batch=a.n_batch, type_k=a.type_k, type_v=a.type_v,
              device=a.device, verbose=False)
    if kind == "budget":
        kw["gpu_memory_mib"] = int(value)
    elif kind == "resident":
        kw["n_ubatch"] = int(value or 2048)
    else:
        raise SystemExit(f"unknown configuration {config!r}: budget:MIB or resident:UB")
    return kw


def run(a) -> None:
    used = _nvml_used()
    base = used()
    rng = np.random.default_rng(0)
    print("config,n_prompt,n_ubatch,prefill_s,prefill_tps,decode_tps,streamed_mb,vram_mib", flush=True)
    for config in a.configs.split(","):
        for n in (int(x) for x in a.lengths.split(",")):
            try:
                llm = Llama(a.model, **_kwargs(config, n, a))
            except Exception as e:   # a configuration that does not fit is a row, not the end
                print(f"{config},{n},,ERROR {type(e).__name__}: {e}", flush=True)
                continue
            toks = rng.integers(10, llm.n_vocab() - 10, size=n + 24).tolist()
            llm.eval(toks[:8])
            llm.reset()
            t0 = time.perf_counter()
            llm.eval(toks[:n])
            t1 = time.perf_counter()
            llm.eval(toks[n:n + 4])
            t2 = time.perf_counter()
            for t in toks[n + 4:n + 20]:
                llm.eval([t])
            t3 = time.perf_counter()
            st = llm.kv_stats()
            print(f"{config},{n},{st.get('n_ubatch', '')},{t1 - t0:.3f},{n / (t1 - t0):.1f},"
                  f"{16 / (t3 - t2):.2f},{st.get('bytes_streamed_last', 0) / 1e6:.0f},"
                  f"{used() - base:.0f}", flush=True)
            llm.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--lengths", default="32768")
    ap.add_argument("--configs", default="budget:16384")
    ap.add_argument("--n-batch", type=int, default=4096)
    ap.add_argument("--type-k", default="q8_0")
    ap.add_argument("--type-v", default="q4_0")
    ap.add_argument("--device", default="cuda")
    run(ap.parse_args())


if __name__ == "__main__":
    main()
