"""Where a decode step's time goes through the Python API (GPU machine).

For one GGUF file (a synthetic one: benchmarks/synthetic_model.py), after a
prompt of --depth random ids (q8_0 K and V), per token, the median of --n steps:

  native      Context.decode([t]) alone (the C call, which downloads the logits)
  native+get  the same and Context.logits() (the copy Python makes)
  eval        Llama.eval([t]) (History: decode, sync)
  eval+greedy eval and the greedy Sampler on the last logits
  loop        Context.generate: the core's greedy loop (a pick on the device)
  python/core create_completion(max_tokens=--gen, temperature=0) with the Python
              sampler per token, then the core's loop (greedy_loop.py): llm.timings'
              decode rate and the wall-clock rate after the prefill

With --torch-prof, the kernels of --prof-steps decode steps through torch.profiler
(CUPTI sees the library's launches too): the top kernels by device time.
Prints one JSON line per measurement.

usage: python benchmarks/decode_profile.py FILE [--depth 512] [--n 64] [--torch-prof]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--depth", type=int, default=512)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--torch-prof", action="store_true")
    ap.add_argument("--prof-steps", type=int, default=8)
    ap.add_argument("--tag", default="")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    from pyllamakv import Llama
    from pyllamakv.engine.sampling import Sampler, SamplingParams
    llm = Llama(a.path, n_ctx=a.depth + 4 * a.n + a.gen + 64, n_batch=4096, type_k="q8_0",
                type_v="q8_0", device=a.device, verbose=False)
    rng = np.random.default_rng(0)
    toks = rng.integers(300, 30000, a.depth + 8 * a.n).tolist()
    llm.eval(toks[:a.depth])
    ctx = llm.sequence.ctx
    out = {"file": a.path, "tag": a.tag, "depth": a.depth}

    def per_token(fn, n=a.n) -> float:
        ts = []
        for i in range(n):
            t0 = time.perf_counter()
            fn(i)
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts[4:]) * 1e3

    base = a.depth
    out["native_ms"] = per_token(lambda i: ctx.decode([toks[base + i]]))
    llm.sequence.sync()
    base += a.n
    out["native_get_ms"] = per_token(lambda i: (ctx.decode([toks[base + i]]), ctx.logits()))
    llm.sequence.sync()
    base += a.n
    out["eval_ms"] = per_token(lambda i: llm.eval([toks[base + i]]))
    base += a.n
    sampler = Sampler(SamplingParams(temperature=0.0), llm.n_vocab())
    out["eval_greedy_ms"] = per_token(
        lambda i: (llm.eval([toks[base + i]]), sampler.sample(llm.sequence.last_logits(), ())))
    base += a.n
    if hasattr(ctx, "generate"):
        llm.sequence.sync()
        t0 = time.perf_counter()
        got = ctx.generate(a.n)
        out["loop_ms"] = (time.perf_counter() - t0) * 1e3 / max(len(got), 1)
    ctx.truncate(a.depth)
    llm.sequence.sync()
    llm.create_completion(toks[:16], max_tokens=4, temperature=0)
    for mode in ("python", "core"):   # the Python sampler per token; the core's greedy loop
        llm.greedy_in_core = mode == "core"
        llm.create_completion(toks[:16], max_tokens=4, temperature=0)
        t0 = time.perf_counter()
        r = llm.create_completion(toks[:a.depth], max_tokens=a.gen, temperature=0, stop=[])
        wall = time.perf_counter() - t0
        t = llm.timings
        ct = r["usage"]["completion_tokens"]
        out[f"{mode}_decode_ts"] = round(t.decode_tokens / max(t.decode_s, 1e-9), 2)
        out[f"{mode}_sample_ms"] = round(t.sample_s * 1e3 / max(ct, 1), 4)
        out[f"{mode}_prefill_s"] = round(t.prefill_s, 4)
        out[f"{mode}_tokens"] = ct
        out[f"{mode}_ts_wall"] = round((ct - 1) / max(wall - t.prefill_s, 1e-9), 2)
        out[f"{mode}_text_ids"] = hash(r["choices"][0]["text"])
    print(json.dumps(out), flush=True)

    if a.torch_prof:
        import torch
        from torch.profiler import ProfilerActivity, profile
        torch.cuda.init()
        ctx.truncate(a.depth)
        llm.sequence.sync()
        for i in range(4):
            ctx.decode([toks[i]])
        with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
            for i in range(a.prof_steps):
                ctx.decode([toks[10 + i]])
        rows = []
        for ev in prof.key_averages():
            dt = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0)
            if dt:
                rows.append((dt / a.prof_steps, ev.count / a.prof_steps, ev.key[:90]))
        rows.sort(reverse=True)
        total = sum(r[0] for r in rows if not r[2].startswith("cuda") and "Memcpy" not in r[2])
        print(json.dumps({"tag": a.tag, "prof_kernel_us_per_step": round(total, 1)}))
        for us, cnt, name in rows[:25]:
            print(f"  {us:9.1f} us/step  {cnt:6.1f}x  {name}")
    llm.close()


if __name__ == "__main__":
    main()
