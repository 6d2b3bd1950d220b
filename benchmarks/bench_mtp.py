"""What a qwen35 model's MTP block costs: the trunk's decode step with and
without the block beside it (each micro-batch also writes the block's K/V),
with the block switched off (step_mtp_off: should be the plain step), and one
MTP draft of k = 1..max-k tokens, at given depths.

    python benchmarks/synthetic_model.py qwen35-27b q35-mtp.gguf --type q4_k --mtp
    python benchmarks/bench_mtp.py --model q35-mtp.gguf --device cuda --depths 8192,32768
    python benchmarks/bench_mtp.py --shape qwen35-tiny --depths 512          # CPU, writes it

With the verification cost of bench_speculative.py verify (which does not
depend on the drafter) the rate of MTP speculation is
tokens_per_pass / (step_mtp + draft(k) + verify(k)) against 1 / step. The
acceptance rate needs a real Qwen3.5 GGUF with its MTP tensors (random
synthetic weights accept nothing): Llama(path, draft_model="mtp").timings
gives drafted and accepted tokens per generation.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "tests"))   # tests/fixtures

from pyllamakv.core.native import Context, Model, cuda_device_count  # noqa: E402

FIELDS = ["model", "device", "depth", "k", "step_ms", "step_mtp_ms", "step_mtp_off_ms",
          "draft_ms"]


def _median(fn, repeat: int) -> float:
    times = []
    for r in range(repeat + 1):
        t0 = time.perf_counter()
        fn()
        if r:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _filled(m: Model, a, depth: int, toks: list[int], mtp: bool) -> Context:
    c = Context(m, n_ctx=depth + a.max_k + 8, n_batch=512, n_ubatch=512, n_threads=a.threads,
                type_k=a.type_k, type_v=a.type_v, mtp=mtp)
    for i in range(0, depth, 512):
        c.decode(toks[i:min(i + 512, depth)])
    c.snapshot()   # hybrids: the step below is timed, then truncated back here
    return c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="a qwen35 GGUF with an MTP block")
    ap.add_argument("--shape", default="qwen35-tiny", help="else a synthetic qwen35 shape")
    ap.add_argument("--weight-type", default="q4_k")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--depths", default="512")
    ap.add_argument("--type-k", default="f16")
    ap.add_argument("--type-v", default="f16")
    ap.add_argument("--max-k", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default="mtp-out")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    device = a.device if a.device != "auto" else ("cuda" if cuda_device_count() else "cpu")
    path = a.model
    if path is None:
        from fixtures import synthetic as synthetic_model
        from gguf import GGMLQuantizationType as T
        path = str(out / f"synthetic-{a.shape}-{a.weight_type}-mtp.gguf")
        if not Path(path).exists():
            synthetic_model.write(synthetic_model.SHAPES[a.shape], path,
                                  T[a.weight_type.upper()], n_nextn=1)
    m = Model(path, device=device, n_threads=a.threads)
    if m.n_nextn < 1:
        sys.exit(f"{path} has no MTP block (synthetic_model.py --mtp writes one)")
    rng = np.random.default_rng(0)
    rows = []
    for depth in [int(d) for d in a.depths.split(",")]:
        toks = rng.integers(0, m.n_vocab, depth + 1).tolist()
        step = {}
        for mtp in (False, True):
            c = _filled(m, a, depth, toks, mtp)

            def one() -> None:
                c.decode(toks[depth:depth + 1])
                c.truncate(depth)
            if mtp:   # the block switched off (lkv_context_set_mtp): the trunk's cost again
                c.set_mtp(False)
                step["off"] = _median(one, a.repeat)
                c.set_mtp(True)   # in sync again: truncate(depth) kept the snapshot's hidden
            step[mtp] = _median(one, a.repeat)
            if mtp:
                for k in range(1, a.max_k + 1):
                    d = _median(lambda: c.mtp_draft(toks[depth], k), a.repeat)
                    row = dict(model=Path(path).name, device=device, depth=depth, k=k,
                               step_ms=round(step[False] * 1e3, 3),
                               step_mtp_ms=round(step[True] * 1e3, 3),
                               step_mtp_off_ms=round(step["off"] * 1e3, 3),
                               draft_ms=round(d * 1e3, 3))
                    rows.append(row)
                    print(" ".join(f"{f}={row[f]}" for f in FIELDS[2:]), flush=True)
            c.close()
    with (out / "mtp.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
