"""Aggregate decode tokens/s of B sequences in one context (one decode call per
step, the weights read once for all B), the figure llama.cpp's
llama-batched-bench prints as S_TG (its -npl list is -b here, -npp --prompt,
-ntg -n), at given prompt depths and KV pool sizes.

    python benchmarks/bench_multiseq.py --shape llama3-8b -b 1,4,16,32 -n 64 \\
        --prompt 4096 --pool-mib resident --fill state --deadline 540 --out ms-out
    python benchmarks/bench_multiseq.py --shape llama-tiny -b 1,4 -n 2 --prompt 64   # CPU smoke

--shape writes the synthetic file (benchmarks/synthetic_model.py, --weight-type)
into --out, or to --model's path when given with it, unless it is there.

Per row (prompt depth P, pool, B): a context of B sequences of P + n positions
each (--type-k/--type-v, one pool of --pool-mib shared by all; 'resident': no
bound), every sequence filled with a P-token random prompt (--fill prefill: each
prefilled; copy: sequence 0 prefilled, then copied to the others with
seq_copy; state: sequence 0 prefilled, its state saved once and loaded into
the others through the per-sequence state calls), --warmup untimed steps, then
n timed steps of one random token per sequence, each step one decode_batch
keeping every sequence's logits (as llama-batched-bench does). The figure is
B * n / (seconds of the timed steps). --deadline stops cleanly: the row in
progress ends with the steps it has (status "partial"), the rest are skipped.
--in-turn also times the same steps on B one-sequence contexts stepped in turn
(what batching saves: the weights read once per step, not B times).

Beside it: llama-batched-bench's decode t/s for the same file where known
(the table below, from ../shared/BENCHMARKS.md, for --shape llama3-8b with
q4_0 weights and q8_0 K/V at P = 4096, n = 64), or from --ref: llama-batched-bench's output
saved as it printed it (markdown or --output-format jsonl), a CSV (columns b
or pl, prompt or pp, decode_tps or speed_tg), or numbers "1=245.0,4=584.2"
(every depth of this run); tests/fixtures/batched_ref.py.
"""
from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "tests"))   # tests/fixtures

from fixtures.batched_ref import load_refs, ref_for  # noqa: E402
from fixtures.multiseq_fill import Deadline, check_deadline as _check, fill  # noqa: E402
from pyllamakv.core.native import Context, Model, cuda_device_count  # noqa: E402

MIB = 1 << 20
FIELDS = ["model", "device", "type_k", "type_v", "prompt", "pool_mib", "b", "n", "fill",
          "fill_s", "prefill_tps", "decode_s", "decode_tps", "per_seq_tps", "streamed_mib_step",
          "ref_tps", "ratio", "ref_source", "in_turn_tps", "x_in_turn", "status"]


def _ints(text: str, name: str) -> list[int]:
    try:
        v = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"{name}: a comma-separated list of ints, got {text!r}")
    if not v or min(v) < 1:
        raise SystemExit(f"{name}: positive ints, got {text!r}")
    return v


def _pools(text: str) -> list[float | None]:
    out = []
    for x in text.split(","):
        x = x.strip()
        if x == "resident":
            out.append(None)
            continue
        try:
            out.append(float(x))
        except ValueError:
            raise SystemExit(f"--pool-mib: 'resident' or MiB, got {x!r}")
        if out[-1] <= 0:
            raise SystemExit(f"--pool-mib: a positive size, got {x!r}")
    return out


# ---------------------------------------------------------------- one row

def _timed(step, warmup: int, n: int, deadline) -> tuple[int, float]:
    """warmup untimed calls of step(i), then n timed ones (fewer at the deadline):
    (timed calls done, their seconds)."""
    for i in range(warmup):
        _check(deadline)
        step(i)
    done, t0 = 0, time.perf_counter()
    try:
        for i in range(warmup, warmup + n):
            _check(deadline)
            step(i)
            done += 1
    except Deadline:
        pass
    return done, time.perf_counter() - t0


def in_turn(m: Model, kw: dict, blob: bytes, b: int, steps: np.ndarray, a, deadline) -> float:
    """The same steps on b one-sequence contexts (each a b-th of the pool) stepped in
    turn, every one loaded with blob: aggregate t/s (0 when none finished)."""
    pool = kw["kv_pool_bytes"]
    kw = dict(kw, n_seq_max=1, kv_pool_bytes=None if pool is None else pool // b)
    ctxs = []
    try:
        for _ in range(b):
            ctxs.append(Context(m, **kw))
            ctxs[-1].state_set(blob)

        def step(i: int) -> None:
            for s, c in enumerate(ctxs):
                c.decode([int(steps[i, s])])
        done, dt = _timed(step, a.warmup, a.n, deadline)
        return b * done / dt if done else 0.0
    finally:
        for c in ctxs:
            c.close()


def run_row(m: Model, a, prompt: int, pool: float | None, b: int, deadline) -> dict:
    rng = np.random.default_rng(prompt * 1000 + b)
    n_batch = max(a.batch, b)
    kw = dict(n_ctx=prompt + a.warmup + a.n, n_batch=n_batch, n_ubatch=min(a.ubatch, n_batch),
              n_threads=a.threads, type_k=a.type_k, type_v=a.type_v, n_seq_max=b,
              kv_pool_bytes=None if pool is None else int(pool * MIB))
    row = dict(prompt=prompt, pool_mib="resident" if pool is None else pool, b=b, n=0,
               fill=a.fill, status="ok")
    try:
        ctx = Context(m, **kw)
    except Exception as e:   # a pool below the plan's minimum, no memory: the row says so
        row["status"] = f"error: {e}"
        return row
    blob = None
    steps = rng.integers(0, m.n_vocab, (a.warmup + a.n, b))
    seqs = list(range(b))
    try:
        t0 = time.perf_counter()
        t_first = fill(ctx, b, rng.integers(0, m.n_vocab, prompt), a.fill, n_batch, deadline)
        row["fill_s"] = round(time.perf_counter() - t0, 3)
        row["prefill_tps"] = round(prompt / t_first, 1)
        if a.in_turn:
            blob = ctx.seq_state_get(0)
        done, dt = _timed(lambda i: ctx.decode_batch(steps[i].tolist(), seqs), a.warmup, a.n,
                          deadline)
        row["status"] = "ok" if done == a.n else "partial" if done else "deadline"
        if done:
            streamed = sum(ctx.seq_kv_stats(s)["bytes_streamed_last"] for s in seqs)
            row.update(n=done, decode_s=round(dt, 4), decode_tps=round(b * done / dt, 2),
                       per_seq_tps=round(done / dt, 2),
                       streamed_mib_step=round(streamed / MIB, 2))
    except Deadline:
        row["status"] = "deadline"
    finally:
        ctx.close()
    if blob is not None and row["status"] == "ok":
        try:
            tps = in_turn(m, kw, blob, b, steps, a, deadline)
            if tps:
                row.update(in_turn_tps=round(tps, 2), x_in_turn=round(row["decode_tps"] / tps, 3))
        except Exception as e:
            row["status"] = f"ok; in turn: {e}"
    return row


# ---------------------------------------------------------------- main

def _model_path(a, out: Path) -> tuple[str, tuple | None]:
    """The GGUF, and (shape, weight type) when it is a synthetic file."""
    if a.shape is None:
        if a.model is not None:
            return a.model, None
        a.shape = "llama3-8b"
    from fixtures import synthetic as synthetic_model
    from gguf import GGMLQuantizationType as T
    if a.shape not in synthetic_model.SHAPES:
        raise SystemExit(f"--shape: one of {', '.join(sorted(synthetic_model.SHAPES))}")
    path = Path(a.model) if a.model else out / f"synthetic-{a.shape}-{a.weight_type}.gguf"
    if not path.exists():
        print(f"writing {path} ...", flush=True)
        tmp = path.with_suffix(".part")
        synthetic_model.write(synthetic_model.SHAPES[a.shape], tmp, T[a.weight_type.upper()])
        tmp.rename(path)
    return str(path), (a.shape, a.weight_type)


def _show(row: dict) -> str:
    ref = f"{row['ref_tps']:8.1f}  x{row['ratio']:.2f}" if row.get("ref_tps") else f"{'-':>8}"
    tps = row.get("decode_tps")
    turn = f"  in turn {row['in_turn_tps']} (x{row['x_in_turn']})" if "in_turn_tps" in row else ""
    return (f"P={row['prompt']:6d} pool={str(row['pool_mib']):>8} B={row['b']:3d} "
            f"fill={row.get('fill_s', '-')}s  decode {tps if tps else '-':>9} t/s "
            f"({row.get('per_seq_tps', '-')} per seq, n={row['n']})  "
            f"ref {ref}{turn}  {row['status']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None,
                    help="a GGUF; with --shape, that shape's synthetic file (written if missing)")
    ap.add_argument("--shape", default=None,
                    help="a synthetic_model.py shape (default llama3-8b without --model)")
    ap.add_argument("--weight-type", default="q4_0", help="the synthetic file's weights")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--type-k", default="q8_0")
    ap.add_argument("--type-v", default="q8_0")
    ap.add_argument("-b", default="1,4,16,32", help="sequence counts")
    ap.add_argument("-n", type=int, default=64, help="timed decode steps")
    ap.add_argument("--prompt", default="4096", help="prompt depths per sequence")
    ap.add_argument("--pool-mib", default="resident", help="'resident' or MiB, a list")
    ap.add_argument("--fill", default="state", choices=["prefill", "copy", "state"])
    ap.add_argument("--warmup", type=int, default=1, help="untimed decode steps first")
    ap.add_argument("--in-turn", action="store_true",
                    help="also B one-sequence contexts stepped in turn (each a B-th of the pool)")
    ap.add_argument("--batch", type=int, default=2048, help="n_batch (prefill calls)")
    ap.add_argument("--ubatch", type=int, default=512)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--deadline", type=float, default=None, help="seconds; stop cleanly")
    ap.add_argument("--ref", default=None, help="llama-batched-bench figures (see above)")
    ap.add_argument("--out", default="multiseq-out", help="directory for the CSV")
    a = ap.parse_args()
    t_start = time.monotonic()
    deadline = None if a.deadline is None else t_start + a.deadline
    if a.n < 1 or a.warmup < 0:
        raise SystemExit("-n must be >= 1 and --warmup >= 0")
    bs, prompts, pools = _ints(a.b, "-b"), _ints(a.prompt, "--prompt"), _pools(a.pool_mib)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path, synth = _model_path(a, out)
    refs, ref_source = load_refs(a.ref, synth and (*synth, a.type_k, a.type_v, 4096))
    device = a.device if a.device != "auto" else ("cuda" if cuda_device_count() else "cpu")
    rows = []
    with Model(path, device=device, n_threads=a.threads) as m:
        print(f"{Path(path).name} on {device}, K {a.type_k} / V {a.type_v}, n={a.n}, "
              f"fill {a.fill}; ref: {ref_source or 'none known (--ref)'}", flush=True)
        for prompt in prompts:
            for pool in pools:
                for b in bs:
                    if deadline is not None and time.monotonic() >= deadline:
                        row = dict(prompt=prompt, pool_mib="resident" if pool is None else
                                   pool, b=b, n=0, fill=a.fill, status="skipped (deadline)")
                    else:
                        row = run_row(m, a, prompt, pool, b, deadline)
                    ref = ref_for(refs, prompt, b)
                    row.update(model=Path(path).name, device=device, type_k=a.type_k,
                               type_v=a.type_v, ref_source=ref_source if ref else "")
                    if ref and row.get("decode_tps"):
                        row.update(ref_tps=ref, ratio=round(row["decode_tps"] / ref, 3))
                    rows.append(row)
                    print(_show(row), flush=True)
    with (out / "multiseq.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {out / 'multiseq.csv'} ({len(rows)} rows, "
          f"{time.monotonic() - t_start:.0f} s)")


if __name__ == "__main__":
    main()
