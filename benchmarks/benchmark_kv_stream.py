"""KV streaming benchmark: prefill and decode speed against context depth,
all resident vs a bounded pool, with the PCIe bound beside each figure.

For each depth from 8K doubling to --max-context: fill the cache to that
depth, then time a prefill of --batch-size tokens at that depth (pp) and
--n-gen single-token decodes (tg), each the median of --repeat runs. Modes: "resident" (no bound, when the
whole cache fits), "auto" (the largest pool that fits in free memory; equal to
resident on a card that holds everything) and fixed pools (--pools MiB,...).
The vram_mib column is the device memory in use (total - free, as the CUDA
runtime reports it) after the timed decodes, with the model, the context and
its pool alive: the process's whole footprint, CUDA's own context included;
vram_base_mib is the same figure before the model loads (the CUDA context and
whatever else the device holds), so vram_mib - vram_base_mib is pyllamakv's own.
Each row lands in results.csv under --out as soon as it is measured, and rows
already there (same model, device, KV types, depth and mode) are skipped, with a
line on stderr, so an interrupted sweep resumes. Plots: PNG + SVG.

    python benchmarks/benchmark_kv_stream.py --shape llama3-8b --max-context 131072 \\
        --type-k q8_0 --type-v q8_0 --pools auto,4096,1024 --out bench-out
"""
from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "tests"))   # tests/fixtures

from pyllamakv.core.native import Context, Model, cuda_device_count  # noqa: E402
from pyllamakv.memory.plan import auto_pool_bytes, kv_bytes_per_token, kv_plan  # noqa: E402

PCIE = 55e9
FIELDS = ["model", "device", "type_k", "type_v", "depth", "mode", "pool_mib", "fill_s",
          "pp_tps", "tg_tps", "resident_fraction", "streamed_per_token_mb", "stream_gbps",
          "pcie_bound_tps", "ratio_to_bound", "kv_mb", "vram_mib", "vram_base_mib"]


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="a GGUF file")
    src.add_argument("--shape", help="a synthetic shape (benchmarks/synthetic_model.py)")
    ap.add_argument("--weight-type", default="q4_0")
    ap.add_argument("--max-context", type=int, default=32768)
    ap.add_argument("--min-context", type=int, default=8192)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--ubatch-size", type=int, default=512)
    ap.add_argument("--type-k", default="q8_0")
    ap.add_argument("--type-v", default="q8_0")
    ap.add_argument("--pools", default="auto",
                    help="comma list: auto, MiB values, and/or budgetN (the pool that "
                         "gpu_memory_mib=N leaves after weights and workspace)")
    ap.add_argument("--n-gen", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of pp and tg (median)")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default="bench-out")
    ap.add_argument("--depths", default=None,
                    help="comma list of depths, measured in this order (instead of the sweep)")
    ap.add_argument("--fill", default="prefill", choices=["prefill", "state"],
                    help="reach the depth by prefilling, or by loading a synthetic KV state "
                         "(random rows: seconds instead of a long prefill; speed only)")
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds: start no new measurement after this; plot what there is")
    return ap.parse_args()


def model_file(a: argparse.Namespace, out: Path) -> str:
    if a.model:
        return a.model
    from gguf import GGMLQuantizationType as T
    from fixtures import synthetic as synthetic_model
    path = out / f"synthetic-{a.shape}-{a.weight_type}.gguf"
    if not path.exists():
        print(f"writing {path} ...", file=sys.stderr, flush=True)
        synthetic_model.write(synthetic_model.SHAPES[a.shape], path, T[a.weight_type.upper()])
    return str(path)


def budget_pool(m: Model, a: argparse.Namespace, n_ctx: int, device: str,
                mib: float) -> int | None:
    """The KV pool Llama(gpu_memory_mib=mib) would get here (None: all resident)."""
    from pyllamakv.memory.budget import plan_budget
    from pyllamakv.config import LlamaConfig
    cfg = LlamaConfig(n_ctx, n_batch=a.batch_size, n_ubatch=a.ubatch_size, type_k=a.type_k,
                      type_v=a.type_v, gpu_memory_mib=mib)
    split, _ = plan_budget(cfg, m.hparams, m.file.tensors, n_ctx, device)
    print(f"budget {mib:g} MiB at n_ctx {n_ctx}: {split.describe()}", file=sys.stderr)
    return split.pool


def device_used_mib(device: str) -> float | str:
    """device memory in use (total - free), MiB; "" on the CPU"""
    if device != "cuda":
        return ""
    from pyllamakv.core.ffi import ffi, lib
    free, total = ffi.new("int64_t *"), ffi.new("int64_t *")
    if lib.lkv_cuda_mem_info(free, total) != 0:
        return ""
    return round((total[0] - free[0]) / 2**20, 1)


def done_rows(csv_path: Path) -> set[tuple]:
    if not csv_path.exists():
        return set()
    with csv_path.open() as f:
        return {row_key(r) for r in csv.DictReader(f)}


def row_key(r: dict) -> tuple:
    """what makes two rows the same measurement (a resumed sweep skips it)"""
    return tuple(str(r.get(k, "")) for k in ("model", "device", "type_k", "type_v", "depth", "mode"))


_STATE: dict = {}


def synthetic_state(c: Context, m: Model, a, depth: int) -> np.ndarray:
    """A state blob of `depth` positions of random KV rows (block scales small
    and finite), built once per depth: this context's header, n_tokens patched."""
    key = (depth, a.type_k, a.type_v)
    if key in _STATE:
        return _STATE[key]
    _STATE.clear()
    from gguf import GGMLQuantizationType as T
    from gguf.constants import GGML_QUANT_SIZES
    hdr = np.frombuffer(c.state_get(), np.uint8).copy()
    hdr[4:8] = np.frombuffer(np.int32(depth).tobytes(), np.uint8)
    kvb = kv_bytes_per_token(m.hparams, a.type_k, a.type_v) * depth
    blob = np.empty(hdr.size + kvb, np.uint8)
    blob[:hdr.size] = hdr
    rng = np.random.default_rng(1)
    qt = T[a.type_k.upper()]
    _, size = GGML_QUANT_SIZES[qt]
    if a.type_k != a.type_v:   # two layouts: one byte everywhere, 0x1c1c = f16 0.0039 (scales, codes, values)
        pat = np.full(1 << 24, 0x1C, np.uint8)
    elif qt in (T.F16, T.BF16, T.F32):
        pat = (rng.uniform(-0.5, 0.5, (1 << 24) // 4)).astype(
            {T.F16: np.float16, T.F32: np.float32}.get(qt, np.float32))
        pat = pat.view(np.uint8) if qt != T.BF16 else pat.view(np.uint16)[1::2].view(np.uint8)
    else:   # quantized rows: random blocks whose f16 scale (bytes 0..1) is small
        pat = rng.integers(0, 256, ((1 << 24) // size, size), dtype=np.uint8)
        pat[:, 0:2] = np.frombuffer(np.float16(0.004).tobytes(), np.uint8)
        if qt in (T.Q4_1, T.Q5_1):
            pat[:, 2:4] = pat[:, 0:2]
        pat = pat.reshape(-1)
    body = blob[hdr.size:]
    for i in range(0, body.size, pat.size):
        n = min(pat.size, body.size - i)
        body[i:i + n] = pat[:n]
    _STATE[key] = blob
    return blob


def measure(m: Model, a, depth: int, pool: int | None, rng) -> dict:
    n_ctx = depth + a.batch_size + a.n_gen + 8
    c = Context(m, n_ctx=n_ctx, n_batch=a.batch_size, n_ubatch=a.ubatch_size,
                n_threads=a.threads, type_k=a.type_k, type_v=a.type_v, kv_pool_bytes=pool)
    try:
        toks = rng.integers(0, m.n_vocab, depth + a.batch_size).tolist()
        t0 = time.perf_counter()
        if a.fill == "state" and depth > 0:
            c.state_set(synthetic_state(c, m, a, depth))
        else:
            for i in range(0, depth, a.batch_size):
                c.decode(toks[i:min(i + a.batch_size, depth)])
        fill_s = time.perf_counter() - t0
        hybrid = c.recurrent_bytes > 0   # its recurrent state returns only to snapshots
        if hybrid:
            c.snapshot()
        # one untimed prefill first: a loaded state leaves resident slots to refill
        pps = []
        for _ in range(a.repeat + 1):
            t0 = time.perf_counter()
            c.decode(toks[depth:depth + a.batch_size])
            pps.append(a.batch_size / (time.perf_counter() - t0))
            c.truncate(depth)
        pp = statistics.median(pps[1:])
        c.decode([toks[0]])            # warm the decode path at this depth
        if hybrid:
            c.snapshot()
        tgs, streamed = [], 0
        for _ in range(a.repeat):
            c.truncate(depth + 1)
            t0 = time.perf_counter()
            for i in range(a.n_gen):
                c.decode([toks[i + 1]])
                streamed += c.kv_stats()["bytes_streamed_last"]
            tgs.append(a.n_gen / (time.perf_counter() - t0))
        tg = statistics.median(tgs)
        stats = c.kv_stats()
        vram = device_used_mib(a.device_used)
    finally:
        c.close()
    per_tok = streamed / (a.n_gen * a.repeat)
    plan = kv_plan(m.hparams, n_ctx, type_k=a.type_k, type_v=a.type_v, pool_bytes=pool,
                   n_tokens=depth + 1)
    bound = PCIE / per_tok if per_tok else float("inf")
    return dict(fill_s=round(fill_s, 3), pp_tps=round(pp, 2), tg_tps=round(tg, 3),
                resident_fraction=round(plan.resident_fraction, 4),
                streamed_per_token_mb=round(per_tok / 1e6, 3),
                stream_gbps=round(per_tok * tg / 1e9, 3),
                pcie_bound_tps=round(bound, 3) if per_tok else "",
                ratio_to_bound=round(tg / bound, 4) if per_tok else "",
                pool_mib=round(stats["pool_bytes"] / 2**20, 1), vram_mib=vram)


def plot(csv_path: Path, out: Path) -> bool:
    """the PNG and SVG beside the CSV; False without matplotlib (the bench extra)"""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with csv_path.open() as f:
        rows = list(csv.DictReader(f))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for mode in sorted({r["mode"] for r in rows}):
        rs = sorted((r for r in rows if r["mode"] == mode), key=lambda r: int(r["depth"]))
        x = [int(r["depth"]) for r in rs]
        axes[0].plot(x, [float(r["pp_tps"]) for r in rs], marker="o", label=mode)
        axes[1].plot(x, [float(r["tg_tps"]) for r in rs], marker="o", label=mode)
        b = [(int(r["depth"]), float(r["pcie_bound_tps"])) for r in rs if r["pcie_bound_tps"]]
        if b:
            axes[1].plot(*zip(*b), linestyle=":", label=f"{mode}: PCIe bound")
    for ax, t in zip(axes, ["prefill tokens/s", "decode tokens/s"]):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("context depth")
        ax.set_title(t)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(out / f"kv_stream.{ext}")
    return True


def main() -> None:
    a = parse()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    device = a.device if a.device != "auto" else ("cuda" if cuda_device_count() else "cpu")
    path = model_file(a, out)
    if device == "cuda":
        from pyllamakv.memory.plan import cuda_free_bytes
        cuda_free_bytes()        # the CUDA runtime's context exists before the base figure
    vram_base = device_used_mib(device)
    m = Model(path, device=device, n_threads=a.threads)
    a.device_used = device
    csv_path = out / "results.csv"
    seen = done_rows(csv_path)
    rng = np.random.default_rng(0)
    new = not csv_path.exists()
    with csv_path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        t_start = time.perf_counter()
        if a.depths:
            depths = [int(d) for d in a.depths.split(",")]
        else:
            depths, d = [], a.min_context
            while d <= a.max_context:
                depths.append(d)
                d *= 2
        for depth in depths:
            n_ctx = depth + a.batch_size + a.n_gen + 8
            modes: list[tuple[str, int | None]] = [("resident", None)]
            for p in a.pools.split(","):
                if p == "auto":
                    modes.append(("auto", auto_pool_bytes(m.hparams, n_ctx, device,
                                                          type_k=a.type_k, type_v=a.type_v)))
                elif p.startswith("budget"):
                    try:
                        modes.append((f"budget {p[6:]} MiB",
                                      budget_pool(m, a, n_ctx, device, float(p[6:]))))
                    except ValueError as e:
                        print(f"depth {depth} {p}: skipped ({e})", file=sys.stderr)
                elif p:
                    modes.append((f"pool {p} MiB", int(float(p) * 2**20)))
            for mode, pool in modes:
                ident = dict(model=os.path.basename(path), device=device, type_k=a.type_k,
                             type_v=a.type_v, depth=depth, mode=mode)
                if row_key(ident) in seen:
                    print(f"depth {depth} {mode}: skipped (already in {csv_path}; another --out "
                          f"measures it again)", file=sys.stderr)
                    continue
                if a.deadline and time.perf_counter() - t_start > a.deadline:
                    print(f"depth {depth} {mode}: skipped (deadline)", file=sys.stderr)
                    continue
                if mode != "resident" and not mode.startswith("pool") and pool is None:
                    print(f"depth {depth} {mode}: the whole cache fits: the same as the "
                          f"resident run (no pool bound)", file=sys.stderr)
                    continue
                try:
                    r = measure(m, a, depth, pool, rng)
                except (MemoryError, ValueError) as e:
                    print(f"depth {depth} {mode}: skipped ({e})", file=sys.stderr)
                    continue
                row = dict(**ident,
                           kv_mb=round(kv_bytes_per_token(m.hparams, a.type_k, a.type_v)
                                       * depth / 1e6, 1), vram_base_mib=vram_base, **r)
                w.writerow(row)
                f.flush()
                print(" ".join(f"{k}={row[k]}" for k in ("depth", "mode", "pool_mib", "pp_tps",
                      "tg_tps", "resident_fraction", "streamed_per_token_mb", "stream_gbps",
                      "ratio_to_bound", "vram_mib")), flush=True)
    if plot(csv_path, out):
        print(f"results: {csv_path}; plots: {out}/kv_stream.png, .svg")
    else:
        print(f"results: {csv_path}; no plots (matplotlib missing: pip install .[bench])")


if __name__ == "__main__":
    main()
