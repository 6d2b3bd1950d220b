"""llama.cpp's llama-batched-bench decode figures to print beside
bench_multiseq.py's: the ones ../shared/BENCHMARKS.md holds, or the caller's:
llama-batched-bench's output saved as printed (its markdown table, or its
--output-format jsonl lines), a CSV with columns b or pl, prompt or pp,
decode_tps or speed_tg, or "B=t/s" pairs."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

# llama-batched-bench, 2026-12-01, H200, random Llama-3-8B shape, q4_0, -fa on, q8_0 K/V,
# -b 2048 -ub 512, 4096-token prompt per sequence, 64 generated (BENCHMARKS.md)
BATCHED_BENCH = {("llama3-8b", "q4_0", "q8_0", "q8_0", 4096): {1: 245.0, 4: 584.2, 16: 935.0,
                                                               32: 1150.1}}


def load_refs(spec: str | None, key: tuple | None) -> tuple[dict, str]:
    """{(prompt or None, b): t/s} and where they come from; key: BATCHED_BENCH's
    (shape, weight type, K type, V type, prompt) for a synthetic file, else None."""
    if spec is None:
        known = BATCHED_BENCH.get(key) if key else None
        if known is None:
            return {}, ""
        return {(key[-1], b): v for b, v in known.items()}, "BENCHMARKS.md"
    p = Path(spec)
    if not p.is_file():   # numbers: "1=245.0,4=584.2"
        try:
            pairs = [x.split("=") for x in spec.split(",") if x.strip()]
            return {(None, int(b)): float(v) for b, v in pairs}, "--ref"
        except ValueError:
            raise SystemExit(f"--ref: a CSV/jsonl file or B=t/s pairs, got {spec!r}")
    rows = _rows(p.read_text())
    refs = {}
    for r in rows:
        pick = lambda *names: next((r[k] for k in names if k in r and r[k] != ""), None)
        b, pp, tps = pick("b", "pl"), pick("prompt", "pp"), pick("decode_tps", "speed_tg")
        if b is None or tps is None:
            raise SystemExit(f"--ref {p}: a row without b/pl or decode_tps/speed_tg: {r}")
        refs[(None if pp is None else int(pp), int(b))] = float(tps)
    return refs, p.name


def _rows(text: str) -> list[dict]:
    """llama-batched-bench's output as it printed it (log lines and all): its
    --output-format jsonl lines, else its markdown table (PP TG B N_KV T_PP S_PP
    T_TG S_TG ...); else a CSV."""
    lines = [x.strip() for x in text.splitlines()]
    if any(x.startswith("{") for x in lines):
        return [json.loads(x) for x in lines if x.startswith("{")]
    header = next((x for x in lines if x.startswith("|") and "S_TG" in x), None)
    if header is not None:
        names = [c.strip().split()[0] for c in header.strip("|").split("|")]
        rows = []
        for x in lines:
            cells = [c.strip() for c in x.strip("|").split("|")]
            if x.startswith("|") and len(cells) == len(names) and cells[0].isdigit():
                r = dict(zip(names, cells))
                rows.append(dict(pp=r["PP"], pl=r["B"], speed_tg=r["S_TG"]))
        return rows
    return list(csv.DictReader(io.StringIO(text)))


def ref_for(refs: dict, prompt: int, b: int) -> float | None:
    return refs.get((prompt, b), refs.get((None, b)))
