"""Speculative decoding benchmark: what verifying k drafts costs, how many
prompt lookup gets accepted on real text, and the effective decode rate.

    # (1) cost of one pass over [token + k drafts], k = 0..8, against k = 0 (one step)
    python benchmarks/bench_speculative.py verify --depths 512 --out spec-out          # CPU
    python benchmarks/bench_speculative.py verify --shape llama3-8b --device cuda \\
        --depths 32768,131072 --pools 1024,4096 --fill state --out spec-out           # GPU
    # (2) acceptance of prompt lookup, default model, code editing and summarization
    python benchmarks/bench_speculative.py accept --out spec-out
    # (3) effective tokens per pass and rate, from the two CSVs above
    python benchmarks/bench_speculative.py effective --out spec-out

(1) times Context.decode of k + 1 tokens keeping k + 1 logits rows at a given
depth, then truncates back (the rows of rejected drafts), the median of
--repeat runs; with a pool the KV streams, and every streamed chunk serves all
k + 1 queries. (2) runs greedy chat completions with and without
Llama(draft_model=PromptLookupDecoding(...)), checks the texts are equal, and
records drafted/accepted tokens and passes. (3) takes each task's mean drafts
per pass and tokens per pass and divides by the measured cost ratio of that k:
effective rate = tokens_per_pass / cost(k) x the one-step rate.
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

from pyllamakv._native import Context, Model, cuda_device_count  # noqa: E402

VERIFY_FIELDS = ["model", "device", "depth", "pool_mib", "k", "pass_ms", "ratio_to_step",
                 "streamed_mb"]
ACCEPT_FIELDS = ["task", "num_pred_tokens", "tokens", "passes", "drafted", "accepted",
                 "acceptance", "tokens_per_pass", "drafts_per_pass", "plain_tps", "spec_tps",
                 "identical"]


def _write(path: Path, fields: list[str], rows: list[dict]) -> None:
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
            base = None
            for k in range(0, a.max_k + 1):
                times, streamed = [], 0
                for r in range(a.repeat + 1):
                    t0 = time.perf_counter()
                    c.decode(toks[depth:depth + k + 1], n_logits=k + 1)
                    dt = time.perf_counter() - t0
                    streamed += c.kv_stats()["bytes_streamed_last"]
                    c.truncate(depth)                 # the rejected rows
                    if r:
                        times.append(dt)
                t = statistics.median(times)
                base = t if k == 0 else base
                row = dict(model=Path(path).name, device=device, depth=depth,
                           pool_mib=pool_s, k=k, pass_ms=round(t * 1e3, 3),
                           ratio_to_step=round(t / base, 3),
                           streamed_mb=round(streamed / (a.repeat + 1) / 1e6, 2))
                rows.append(row)
                print(" ".join(f"{f}={row[f]}" for f in VERIFY_FIELDS[2:]), flush=True)
            c.close()
    _write(Path(a.out) / "verify.csv", VERIFY_FIELDS, rows)


# ---------------------------------------------------------------- (2) acceptance

def _code_prompt() -> str:
    lines = ["def summarize_orders(orders, tax_rate=0.2):",
             '    """Totals per customer, with tax, and the largest order."""',
             "    totals = {}", "    largest = None", "    count = 0"]
    for i, field in enumerate(["price", "quantity", "discount", "shipping"]):
        lines += ["    for order in orders:",
                  f"        value_{field} = order.get('{field}', 0)",
                  f"        if value_{field} < 0:",
                  f"            raise ValueError('negative {field} in order ' + str(order['id']))",
                  f"        customer = order['customer']",
                  f"        totals.setdefault(customer, 0.0)",
                  f"        totals[customer] += value_{field} * (1 + tax_rate)",
                  f"        count += 1"]
    lines += ["    for customer, total in totals.items():",
              "        if largest is None or total > totals[largest]:",
              "            largest = customer",
              "    return totals, largest, count"]
    code = "\n".join(lines)
    return ("Rename the variable `customer` to `client` everywhere in this Python function. "
            "Reply with the whole function and nothing else.\n\n```python\n" + code + "\n```")


PASSAGE = (
    "The Rhine is one of the major European rivers. It begins in the Swiss canton of Graubunden "
    "in the southeastern Swiss Alps, forms part of the Swiss-Liechtenstein, Swiss-Austrian and "
    "Swiss-German borders, then flows through the German Rhineland and the Netherlands and "
    "empties into the North Sea. The river's length is about 1,230 kilometres. It is the "
    "second-longest river in Central and Western Europe, after the Danube. The Rhine has long "
    "been a navigable waterway, carrying trade and goods deep inland. Castles and fortifications "
    "along its banks show its importance as a border. Since the 19th century, engineers have "
    "straightened and canalized much of the river to make navigation easier and to control "
    "flooding, which has changed its ecology. Today the Rhine is one of the busiest waterways in "
    "the world, and its valley between Bingen and Koblenz is a UNESCO World Heritage Site.")

TASKS = {
    "code-rename": _code_prompt,
    "summarize": lambda: "Summarize this passage in three sentences, reusing its wording.\n\n"
                         + PASSAGE,
}


def accept(a) -> None:
    from pyllamakv import Llama
    from pyllamakv.speculative import PromptLookupDecoding
    rows = []
    plain = Llama(a.model, n_ctx=2048, n_threads=a.threads)
    for task, make in TASKS.items():
        msgs = [{"role": "user", "content": make()}]
        want = plain.create_chat_completion(msgs, temperature=0, max_tokens=a.n_gen)
        plain_tps = plain.timings.decode_tps
        want = want["choices"][0]["message"]["content"]
        for num in [int(x) for x in a.num_pred.split(",")]:
            spec = Llama(a.model, n_ctx=2048, n_threads=a.threads,
                         draft_model=PromptLookupDecoding(max_ngram_size=2, num_pred_tokens=num))
            got = spec.create_chat_completion(msgs, temperature=0, max_tokens=a.n_gen)
            t = spec.timings
            row = dict(task=task, num_pred_tokens=num, tokens=t.decode_tokens,
                       passes=t.verify_passes, drafted=t.drafted_tokens,
                       accepted=t.accepted_tokens, acceptance=round(t.acceptance_rate, 3),
                       tokens_per_pass=round(t.tokens_per_pass, 3),
                       drafts_per_pass=round(t.drafted_tokens / max(t.verify_passes, 1), 3),
                       plain_tps=round(plain_tps, 2), spec_tps=round(t.decode_tps, 2),
                       identical=got["choices"][0]["message"]["content"] == want)
            rows.append(row)
            print(" ".join(f"{f}={row[f]}" for f in ACCEPT_FIELDS), flush=True)
            spec.close()
    _write(Path(a.out) / "accept.csv", ACCEPT_FIELDS, rows)


# ---------------------------------------------------------------- (3) effective rate

def effective(a) -> None:
    out = Path(a.out)
    with (out / "verify.csv").open() as f:
        ver = list(csv.DictReader(f))
    with (out / "accept.csv").open() as f:
        acc = list(csv.DictReader(f))
    setups = sorted({(r["depth"], r["pool_mib"]) for r in ver})
    for depth, pool in setups:
        cost = {int(r["k"]): float(r["ratio_to_step"]) for r in ver
                if (r["depth"], r["pool_mib"]) == (depth, pool)}
        kmax = max(cost)
        for r in acc:
            # the mean drafts per pass, interpolated on the measured cost curve
            k = min(float(r["drafts_per_pass"]), kmax)
            lo = int(k)
            c = cost[lo] if lo == kmax else cost[lo] + (k - lo) * (cost[lo + 1] - cost[lo])
            tpp = float(r["tokens_per_pass"])
            print(f"depth={depth} pool={pool} task={r['task']} num_pred={r['num_pred_tokens']} "
                  f"tokens/pass={tpp:.2f} cost(k={k:.2f})={c:.3f}x "
                  f"effective speedup={tpp / c:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("verify")
    v.add_argument("--model", default=None, help="a GGUF file (default: the default model)")
    v.add_argument("--shape", default=None, help="a synthetic shape, e.g. llama3-8b")
    v.add_argument("--weight-type", default="q4_0")
    v.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    v.add_argument("--depths", default="512")
    v.add_argument("--pools", default="resident", help="comma list: resident and/or MiB")
    v.add_argument("--fill", default="prefill", choices=["prefill", "state"])
    v.add_argument("--type-k", default="f16")
    v.add_argument("--type-v", default="f16")
    v.add_argument("--max-k", type=int, default=8)
    v.add_argument("--repeat", type=int, default=5)
    s = sub.add_parser("accept")
    s.add_argument("--model", default=None)
    s.add_argument("--n-gen", type=int, default=256)
    s.add_argument("--num-pred", default="10,4", help="num_pred_tokens values")
    e = sub.add_parser("effective")
    for p in (v, s, e):
        p.add_argument("--out", default="spec-out")
        p.add_argument("--threads", type=int, default=None)
    a = ap.parse_args()
    Path(a.out).mkdir(parents=True, exist_ok=True)
    {"verify": verify, "accept": accept, "effective": effective}[a.cmd](a)


if __name__ == "__main__":
    main()
