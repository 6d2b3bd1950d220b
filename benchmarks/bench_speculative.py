"""Speculative decoding benchmark: what verifying k drafts costs, how many
drafts get accepted on realistic text, and the speedup that follows.

    # (1) cost of one pass over [token + k drafts], k = 0..15, against k = 0 (one step)
    python benchmarks/bench_speculative.py verify --depths 512 --verify-csv spec-out/verify.csv
    python benchmarks/bench_speculative.py verify --shape llama3-8b --device cuda \\
        --depths 32768,131072 --pools 1024,4096 --fill state --verify-csv spec-out/verify.csv
    # (2) acceptance on the chat tasks of spec_tasks.py (default model, greedy; asserts the
    #     output equals plain greedy), see bench_spec_accept.py for the drafter options
    python benchmarks/bench_speculative.py accept --lookup 3:4,3:8,5:10 --self-repeat on,off \\
        --accept-csv spec-out/accept.csv
    # (3) per verify setup and (task class, setting): effective and PCIe-bound speedups
    python benchmarks/bench_speculative.py effective --verify-csv spec-out/verify.csv \\
        --accept-csv spec-out/accept.csv

(1) times Context.decode of k + 1 tokens keeping k + 1 logits rows at a given
depth, then truncates back (the rows of rejected drafts), the median of
--repeat rounds, each round over every k; with a pool the KV streams, and
every streamed chunk serves all k + 1 queries (streamed_mb stays that of one
step). (3) prices every
verification pass of (2) at the measured cost of its own draft length k:
effective speedup = tokens per pass / mean pass cost (relative to one plain
step; drafting time left out, which prompt lookup makes negligible). Under
streaming, when the PCIe transfer of the KV dominates a step and a pass of
k + 1 tokens streams it once, the bound is the tokens per pass itself
(pcie_bound_speedup). Both columns are printed.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "tests"))   # tests/fixtures

from fixtures.spec_bench import pass_cost  # noqa: E402
from pyllamakv.core.native import Context, Model, cuda_device_count  # noqa: E402

VERIFY_FIELDS = ["model", "device", "depth", "pool_mib", "k", "pass_ms", "ratio_to_step",
                 "streamed_mb"]


def _write(path: Path, fields: list[str], rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


# ---------------------------------------------------------------- (1) verification cost

def verify(a) -> None:
    import benchmark_kv_stream as kvs
    device = a.device if a.device != "auto" else ("cuda" if cuda_device_count() else "cpu")
    path = a.model
    if a.shape:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        path = kvs.model_file(SimpleNamespace(model=None, shape=a.shape,
                                              weight_type=a.weight_type), Path(a.out))
    if path is None:
        from pyllamakv.default_model import default_model_path
        path = default_model_path()
    m = Model(path, device=device, n_threads=a.threads)
    rng = np.random.default_rng(0)
    rows = []
    for depth in [int(d) for d in a.depths.split(",")]:
        for pool_s in a.pools.split(","):
            pool = None if pool_s == "resident" else int(float(pool_s) * 2**20)
            c = Context(m, n_ctx=depth + 16, n_batch=512, n_ubatch=512, n_threads=a.threads,
                        type_k=a.type_k, type_v=a.type_v, kv_pool_bytes=pool)
            toks = rng.integers(0, m.n_vocab, depth + 16).tolist()
            if a.fill == "state":
                st = SimpleNamespace(type_k=a.type_k, type_v=a.type_v)
                c.state_set(kvs.synthetic_state(c, m, st, depth))
            else:
                for i in range(0, depth, 512):
                    c.decode(toks[i:min(i + 512, depth)])
            c.decode(toks[depth:depth + 1])          # warm the decode path at this depth
            c.truncate(depth)
            ks = range(0, a.max_k + 1)
            times = {k: [] for k in ks}
            streamed = {k: 0 for k in ks}
            for r in range(a.repeat + 1):             # rounds over every k: a slow spell of
                for k in ks:                          # the machine hits all k alike
                    t0 = time.perf_counter()
                    c.decode(toks[depth:depth + k + 1], n_logits=k + 1)
                    dt = time.perf_counter() - t0
                    streamed[k] += c.kv_stats()["bytes_streamed_last"]
                    c.truncate(depth)                 # the rejected rows
                    if r:                             # round 0 warms up
                        times[k].append(dt)
            base = statistics.median(times[0])
            for k in ks:
                t = statistics.median(times[k])
                row = dict(model=Path(path).name, device=device, depth=depth,
                           pool_mib=pool_s, k=k, pass_ms=round(t * 1e3, 3),
                           ratio_to_step=round(t / base, 3),
                           streamed_mb=round(streamed[k] / (a.repeat + 1) / 1e6, 2))
                rows.append(row)
                print(" ".join(f"{f}={row[f]}" for f in VERIFY_FIELDS[2:]), flush=True)
            c.close()
    _write(Path(a.verify_csv), VERIFY_FIELDS, rows)


# ---------------------------------------------------------------- (3) effective rate

def _cost_curve(rows: list[dict]) -> dict[int, float]:
    return {int(r["k"]): float(r["ratio_to_step"]) for r in rows}


EFFECTIVE_FIELDS = ["device", "depth", "pool_mib", "kind", "setting", "tokens_per_pass",
                    "accepted_per_pass", "acceptance", "mean_k", "pass_cost",
                    "effective_speedup", "pcie_bound_speedup", "measured_speedup_cpu"]


def effective(a) -> None:
    """Per verify setup and per (task class, setting): the speedup over plain
    decoding when each pass costs its measured cost(k) (effective_speedup =
    tokens per pass / mean pass cost), and the PCIe bound under streaming (a
    pass of k + 1 tokens streams the KV once, as one step does: the bound is
    the tokens per pass)."""
    from bench_spec_accept import class_summary
    with Path(a.verify_csv).open() as f:
        ver = list(csv.DictReader(f))
    with Path(a.accept_csv).open() as f:
        summary = class_summary(list(csv.DictReader(f)))
    setups: dict[tuple, list[dict]] = {}
    for r in ver:
        setups.setdefault((r["device"], r["depth"], r["pool_mib"]), []).append(r)
    rows = []
    for (device, depth, pool), vr in setups.items():
        cost = _cost_curve(vr)
        print(f"\n{device} depth={depth} pool={pool}: cost(k) = "
              + " ".join(f"{k}:{c:.2f}" for k, c in sorted(cost.items())))
        w = max(28, *(len(s["setting"]) for s in summary))
        print(f"{'class':6} {'setting':{w}} {'tok/pass':>8} {'mean k':>6} {'cost':>6} "
              f"{'effective':>9} {'pcie-bound':>10}")
        for s in summary:
            c = pass_cost(cost, s["k_counts"])
            mean_k = sum(k * n for k, n in s["k_counts"].items()) / max(s["passes"], 1)
            row = dict(device=device, depth=depth, pool_mib=pool, kind=s["kind"],
                       setting=s["setting"], tokens_per_pass=round(s["tokens_per_pass"], 3),
                       accepted_per_pass=round(s["accepted_per_pass"], 3),
                       acceptance=round(s["acceptance"], 3), mean_k=round(mean_k, 2),
                       pass_cost=round(c, 3),
                       effective_speedup=round(s["tokens_per_pass"] / c, 3),
                       pcie_bound_speedup=round(s["tokens_per_pass"], 3),
                       measured_speedup_cpu=round(s["spec_tps"] / s["plain_tps"], 3))
            rows.append(row)
            print(f"{s['kind']:6} {s['setting']:{w}} {row['tokens_per_pass']:8.2f} "
                  f"{mean_k:6.2f} {c:6.2f} {row['effective_speedup']:8.2f}x "
                  f"{row['pcie_bound_speedup']:9.2f}x")
    if a.effective_csv:
        _write(Path(a.effective_csv), EFFECTIVE_FIELDS, rows)


def accept(a) -> None:
    from bench_spec_accept import class_summary, print_summary, run, write_csv
    rows = run(a)
    write_csv(Path(a.accept_csv), rows)
    print_summary(class_summary(rows))


def main() -> None:
    from bench_spec_accept import add_args
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("verify", help="(1) the cost of a pass over [token + k drafts]")
    v.add_argument("--model", default=None, help="a GGUF file (default: the default model)")
    v.add_argument("--shape", default=None, help="a synthetic shape, e.g. llama3-8b")
    v.add_argument("--weight-type", default="q4_0")
    v.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    v.add_argument("--depths", default="512")
    v.add_argument("--pools", default="resident", help="comma list: resident and/or MiB")
    v.add_argument("--fill", default="prefill", choices=["prefill", "state"])
    v.add_argument("--type-k", default="f16")
    v.add_argument("--type-v", default="f16")
    v.add_argument("--max-k", type=int, default=15)
    v.add_argument("--repeat", type=int, default=5)
    v.add_argument("--threads", type=int, default=None)
    v.add_argument("--out", default="spec-out", help="where a synthetic model is written")
    v.add_argument("--verify-csv", default="spec-out/verify.csv")
    s = sub.add_parser("accept", help="(2) acceptance on the tasks of spec_tasks.py")
    add_args(s)
    e = sub.add_parser("effective", help="(3) effective and PCIe-bound speedups from (1), (2)")
    e.add_argument("--verify-csv", default="spec-out/verify.csv")
    e.add_argument("--accept-csv", default="spec-out/accept.csv")
    e.add_argument("--effective-csv", default="spec-out/effective.csv")
    a = ap.parse_args()
    {"verify": verify, "accept": accept, "effective": effective}[a.cmd](a)


if __name__ == "__main__":
    main()
