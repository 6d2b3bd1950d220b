"""Speculative acceptance on realistic chat tasks (tests/fixtures/spec_tasks.py).

    python benchmarks/bench_spec_accept.py --lookup 3:4,3:8,5:10 --accept-csv spec-out/accept.csv
    python benchmarks/bench_spec_accept.py --lookup 2:10 --self-repeat on,off --mtp 3 \\
        --draft self:4 --tasks code --n-gen 128

Each task runs greedily once without speculation and once per drafter setting
on the same prompt tokens; the generated ids must equal plain greedy's
(asserted: it is the correctness check). Drafters:

- ``--lookup N:K[:M],...``: prompt lookup, PromptLookupDecoding(max_ngram_size=N,
  num_pred_tokens=K); with M, no draft unless an n-gram of at least M tokens
  matches (PromptLookupDecoding(N, K, min_ngram_size=M); 1 when left out);
- ``--self-repeat on,off``: "on" drafts from the whole context (the library's
  drafter: prompt and the reply so far), "off" only from the prompt (the
  reply's own repetitions drafted nothing), to tell the two sources apart;
- ``--mtp K``: the model's MTP block (skipped when the model has none);
- ``--draft PATH:K`` (or ``self:K`` for the target itself): a draft GGUF;
- ``--adaptive N:K[:M],...``: prompt lookup as above with
  ``adaptive=True`` (pyllamakv/spec/length.py: the draft length chosen per
  pass from the measured cost of passes and the acceptance so far). With
  ``--price CSV:DEPTH:POOL,...`` (bench_speculative.py verify's CSV, e.g.
  benchmarks/results/spec_verify_h200.csv:131072:1024) it learns each pass's
  cost from that table instead of from this machine's clock, one setting per
  table, and the summary gives its speedup priced by the same table (the
  acceptance is this run's, the costs the table's device).

Per row: passes, drafted and accepted tokens, tokens per verification pass
(1 + accepted drafts: the speedup bound when a pass costs one step, as under
KV streaming), accepted drafts per pass, acceptance (accepted / drafted), the
measured decode rate with and without speculation (prefill excluded, drafting
included) and ``k_counts``, how many passes verified k drafts ("k:count" list),
from which bench_speculative.py effective prices each pass by its measured
verification cost.
"""
from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "tests"))   # tests/fixtures

from fixtures import spec_tasks  # noqa: E402
from fixtures.spec_bench import (Recorder, class_summary, greedy, ngram_draft,  # noqa: E402
                                 prompt_tokens)

ACCEPT_FIELDS = ["task", "kind", "setting", "max_draft", "tokens", "passes", "drafted",
                 "accepted", "acceptance", "tokens_per_pass", "accepted_per_pass",
                 "plain_tps", "spec_tps", "measured_speedup", "identical", "k_counts"]


# ---------------------------------------------------------------- drafters

@dataclass(slots=True)
class Setting:
    name: str
    max_draft: int
    kind: str                 # "lookup", "draft" or "mtp" (the target's own block)
    make: Callable | None     # (recorder, device) -> drafter callable; None for mtp
    price: dict | None = None  # k -> cost of a pass relative to a step (--price), adaptive only


def _lookup_maker(n: int, k: int, min_n: int, self_repeat: bool) -> Callable:
    from pyllamakv.spec.drafters import PromptLookupDecoding
    if self_repeat:
        return lambda rec, device: PromptLookupDecoding(n, k, min_n)   # the library's own

    def make(rec: Recorder, device: str) -> Callable:
        def draft(input_ids, **kw):
            ids = np.asarray(input_ids).reshape(-1)
            return ngram_draft(ids, ids if self_repeat else ids[:rec.n_prompt], n, min_n, k)
        return draft
    return make


def _adaptive_maker(n: int, k: int, min_n: int, price: dict | None) -> Callable:
    from pyllamakv.spec.length import DraftLength
    from pyllamakv.spec.drafters import PromptLookupDecoding

    kept: list = []        # one drafter for every task, as a Llama keeps its own

    def make(rec: Recorder, device: str) -> Callable:
        if not kept:
            d = PromptLookupDecoding(n, k, min_n, adaptive=True)
            if price is not None:
                d.length = DraftLength(k, cost_of=lambda tokens, seconds: price[tokens - 1])
            kept.append(d)
        kept[0].length.k_counts.clear()
        return kept[0]
    return make


def load_price(spec: str) -> tuple[str, dict]:
    """CSV:DEPTH:POOL -> (label, {k: cost relative to one step})"""
    path, depth, pool = spec.rsplit(":", 2)
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if r["depth"] == depth and r["pool_mib"] == pool]
    if not rows:
        raise SystemExit(f"--price: no rows for depth {depth}, pool {pool} in {path}")
    return f"{rows[0]['device']} {depth}/{pool}", {int(r["k"]): float(r["ratio_to_step"]) for r in rows}


def _lookup_item(item: str, flag: str) -> tuple[int, int, int]:
    """max_ngram:num_pred[:min_ngram] -> (max_ngram, num_pred, min_ngram)"""
    try:
        n, k, min_n = ([int(x) for x in item.split(":")] + [1])[:3]
        if not 1 <= min_n <= n or k < 1 or item.count(":") not in (1, 2):
            raise ValueError
    except ValueError:
        raise SystemExit(f"{flag} takes max_ngram:num_pred[:min_ngram] like 3:8 or 3:8:2 "
                         f"(1 <= min_ngram <= max_ngram), not {item!r}")
    return n, k, min_n


def parse_settings(a, target: str, prices: list[tuple[str, dict]]) -> list[Setting]:
    from pyllamakv.spec.drafters import DraftModel
    out = []
    for item in filter(None, (a.lookup or "").split(",")):
        n, k, min_n = _lookup_item(item, "--lookup")
        for rep in a.self_repeat.split(","):
            if rep not in ("on", "off"):
                raise SystemExit(f"--self-repeat takes on and/or off, not {rep!r}")
            name = f"lookup {n}:{k}" + (f":{min_n}" if min_n > 1 else "")
            out.append(Setting(f"{name} self_repeat={rep}", k, "lookup",
                               _lookup_maker(n, k, min_n, rep == "on")))
    for item in filter(None, (a.draft or "").split(",")):
        path, _, k = item.rpartition(":")
        if not path or not k.isdigit():
            raise SystemExit(f"--draft takes PATH:K (or self:K), not {item!r}")
        path = target if path == "self" else path
        out.append(Setting(f"draft {Path(path).name}:{k}", int(k), "draft",
                           lambda rec, device, p=path, k=int(k): DraftModel(
                               p, k, n_ctx=a.n_ctx, n_threads=a.threads, device=device)))
    for item in filter(None, (a.adaptive or "").split(",")):
        n, k, min_n = _lookup_item(item, "--adaptive")
        for label, price in prices or [("clock", None)]:
            if price is not None and max(price) < k:
                raise SystemExit(f"--price {label}: costs up to k = {max(price)}, fewer than {k}")
            out.append(Setting(f"adaptive {n}:{k}:{min_n} @{label}", k, "lookup",
                               _adaptive_maker(n, k, min_n, price), price))
    if a.mtp:
        out.append(Setting(f"mtp {a.mtp}", a.mtp, "mtp", None))
    return out


# ---------------------------------------------------------------- one greedy run

def run(a) -> list[dict]:
    from pyllamakv import Llama
    from pyllamakv.default_model import default_model_path
    from pyllamakv.spec.drafters import PromptLookupDecoding
    path = a.model or default_model_path()
    prices = [load_price(p) for p in filter(None, (a.price or "").split(","))]   # read once
    settings = parse_settings(a, path, prices)
    tasks = spec_tasks.by_name(a.tasks)
    kw = dict(n_ctx=a.n_ctx, n_threads=a.threads, device=a.device, verbose=False)
    plain = Llama(path, **kw)
    spec = Llama(path, draft_model=PromptLookupDecoding(), **kw)   # a context with wide logits
    mtp = None
    if any(s.kind == "mtp" for s in settings):
        if plain._model.n_nextn < 1:
            print(f"mtp: skipped, {Path(path).name} has no MTP block", flush=True)
            settings = [s for s in settings if s.kind != "mtp"]
        else:
            mtp = Llama(path, draft_model="mtp", **kw)
            mtp.draft_model.num_pred_tokens = a.mtp
    rows, priced = [], {}
    for task in tasks:
        tokens, ends = prompt_tokens(plain, task)
        want, plain_tps = greedy(plain, tokens, ends, a.n_gen)
        for s in settings:
            llm = mtp if s.kind == "mtp" else spec
            rec = Recorder(llm.draft_model)       # mtp: the context's own drafter
            if s.kind != "mtp":
                rec.base = s.make(rec, llm.device)
            saved, llm.draft_model = llm.draft_model, rec
            rec.start(len(tokens))
            try:
                got, spec_tps = greedy(llm, tokens, ends, a.n_gen)
            finally:
                llm.draft_model = saved
                if s.kind == "draft":
                    rec.base.close()
            t = llm.timings
            row = dict(task=task.name, kind=task.kind, setting=s.name, max_draft=s.max_draft,
                       tokens=len(got), passes=t.verify_passes, drafted=t.drafted_tokens,
                       accepted=t.accepted_tokens, acceptance=round(t.acceptance_rate, 3),
                       tokens_per_pass=round(t.tokens_per_pass, 3),
                       accepted_per_pass=round(t.accepted_tokens / max(t.verify_passes, 1), 3),
                       plain_tps=round(plain_tps, 2), spec_tps=round(spec_tps, 2),
                       measured_speedup=round(spec_tps / plain_tps, 3) if plain_tps else 0.0,
                       identical=got == want,
                       k_counts=" ".join(f"{k}:{c}" for k, c in sorted(rec.passes().items())))
            for label, price in ([(s.name.split("@")[1], s.price)] if s.price is not None
                                 else prices if s.kind == "lookup" else []):
                key = (task.kind, s.name, label)
                priced[key] = priced.get(key, Counter()) + Counter(
                    tokens=len(got), cost=sum(c * price[k] for k, c in rec.passes().items()))
            rows.append(row)
            print(" ".join(f"{f}={row[f]}" for f in ACCEPT_FIELDS[:-1]), flush=True)
            assert got == want, (f"{task.name}, {s.name}: speculative greedy differs from plain "
                                 f"greedy at token {_first_diff(got, want)}")
    for llm in (plain, spec, mtp):
        if llm is not None:
            llm.close()
    for (kind, name, label), c in sorted(priced.items(), key=lambda kv: (kv[0][0], kv[0][2])):
        print(f"priced {kind} @{label}: {name}: {c['tokens']} tokens, passes costing "
              f"{c['cost']:.1f} steps: {c['tokens'] / c['cost']:.3f}x")
    return rows


def _first_diff(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


# ---------------------------------------------------------------- per class

def print_summary(summary: list[dict]) -> None:
    w = max(28, *(len(s["setting"]) for s in summary))
    print(f"{'class':6} {'setting':{w}} {'tok/pass':>8} {'acc/pass':>8} {'accept':>7} "
          f"{'plain t/s':>9} {'spec t/s':>9} {'same':>5}")
    for s in summary:
        print(f"{s['kind']:6} {s['setting']:{w}} {s['tokens_per_pass']:8.2f} "
              f"{s['accepted_per_pass']:8.2f} {s['acceptance']:7.3f} {s['plain_tps']:9.1f} "
              f"{s['spec_tps']:9.1f} {str(s['identical']):>5}")


def write_csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=ACCEPT_FIELDS)
        w.writeheader()
        w.writerows(rows)


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="a GGUF file (default: the default model)")
    p.add_argument("--tasks", default="all", help="comma list of task names, code, prose or all")
    p.add_argument("--lookup", default="2:10,3:4,3:8,5:10",
                   help="prompt-lookup settings, max_ngram:num_pred[:min_ngram] comma list "
                        "('' for none)")
    p.add_argument("--self-repeat", default="on", help="on, off or on,off (lookup only)")
    p.add_argument("--adaptive", default=None,
                   help="adaptive prompt-lookup settings, max_ngram:num_pred[:min_ngram] comma list")
    p.add_argument("--price", default=None,
                   help="CSV:DEPTH:POOL comma list: pass costs an adaptive setting learns from")
    p.add_argument("--mtp", type=int, default=0, help="MTP drafts per pass (0: none)")
    p.add_argument("--draft", default=None, help="draft GGUFs, PATH:K or self:K comma list")
    p.add_argument("--n-gen", type=int, default=192)
    p.add_argument("--n-ctx", type=int, default=2048)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--accept-csv", default="spec-out/accept.csv")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_args(ap)
    a = ap.parse_args(argv)
    rows = run(a)
    write_csv(Path(a.accept_csv), rows)
    print_summary(class_summary(rows))


if __name__ == "__main__":
    main()
