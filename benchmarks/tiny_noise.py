"""The noise floor of tests/test_cuda.py's tiny-model figures: how far the
CPU backend's own logits move (mean KL per case) when the model changes by
one unit in the last place, beside what the GPU's default kernels score
against the unchanged CPU run.

    python benchmarks/tiny_noise.py [--draws 6] [--fraction 0.5] [--seed 7]
        [--cases llama:q4_0,qwen3:q4_1] [--device cuda] [--out FILE]

Each case is one of test_tiny_models_match_the_cpu's (architecture x weight
type, the KV type it rotates to, the same 96 tokens fed the same way). Each
draw toggles the last mantissa bit of a random --fraction of the f32 norm
weights of the blocks (attention, FFN, and qwen3's q / k norms): every
normed activation then moves by at most 2^-23 of itself, as any other float
order of the same arithmetic moves it. The engine rounds every matmul's input
to 8-bit codes and 4- or 5-bit KV rows to their codes, as llama.cpp does, so
such a change flips a few codes, and those flips are what move the logits.
With --device cuda the default ("fast") kernels' mean KL against the
unchanged CPU run is printed beside the floor (issue 15's target: 1e-3).
"""
import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from gguf import GGUFReader

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import test_cuda as tc  # noqa: E402
from golden_noise import flip_last_bit  # noqa: E402


def norm_offsets(path) -> np.ndarray:
    """file offsets of every f32 element of the blocks' norm weights"""
    offs = [t.data_offset + 4 * np.arange(t.n_elements, dtype=np.int64)
            for t in GGUFReader(str(path)).tensors
            if t.name.startswith("blk.") and t.name.endswith("norm.weight") and t.tensor_type == 0]
    if not offs:
        raise SystemExit(f"{path}: no f32 norm weights in blk.*")
    return np.concatenate(offs)


def toggle_last_bit(path, offs) -> None:
    """the last mantissa bit of the f32 at each offset (a second call puts them back)"""
    flip_last_bit(path, offs, np.uint32)


def case_floor(path, tokens, kv, draws: int, fraction: float, rng) -> tuple[np.ndarray, list[float]]:
    """the CPU's logits on the file as it is, and the mean KL of each draw against them"""
    base = tc.engine_logits(path, tokens, kv, kv, "cpu")
    offs = norm_offsets(path)
    kls = []
    for _ in range(draws):
        picks = offs[rng.random(offs.size) < fraction]
        toggle_last_bit(path, picks)
        try:
            got = tc.engine_logits(path, tokens, kv, kv, "cpu")
        finally:
            toggle_last_bit(path, picks)
        kls.append(float(tc.kl_rows(base, got).mean()))
    return base, kls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--draws", type=int, default=6)
    ap.add_argument("--fraction", type=float, default=0.5, help="share of norm weights toggled per draw")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--cases", help="arch:wtype,... (default: all of test_cuda's)")
    ap.add_argument("--device", default="cpu", help="cuda: also score the GPU's default kernels")
    ap.add_argument("--out", help="write the lines (JSON) here too")
    a = ap.parse_args()
    cases = [tuple(c.split(":")) for c in a.cases.split(",")] if a.cases else \
        [(arch, wt) for arch in tc.ARCHS for wt in tc.WEIGHT_TYPES]
    rng = np.random.default_rng(a.seed)
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch, wt in cases:
            path, toks, kv = tc._tiny_case(Path(tmp), arch, wt)
            base, kls = case_floor(path, toks, kv, a.draws, a.fraction, rng)
            line = dict(arch=arch, wtype=wt, kv=kv, floor_mean=float(np.mean(kls)),
                        floor_max=float(np.max(kls)), draws_over_1e3=int(sum(k > 1e-3 for k in kls)))
            if a.device != "cpu":
                gpu = tc.engine_logits(path, toks, kv, kv, a.device)
                line["gpu_kl"] = float(tc.kl_rows(base, gpu).mean())
            lines.append(line)
            print(json.dumps(line), flush=True)
    if a.out:
        Path(a.out).write_text("".join(json.dumps(x) + "\n" for x in lines))
    print(f"{len(lines)} cases, {a.draws} draws each: floor mean over 1e-3 in "
          f"{sum(x['floor_mean'] > 1e-3 for x in lines)}, some draw over 1e-3 in "
          f"{sum(x['draws_over_1e3'] > 0 for x in lines)}")
    if a.device != "cpu":
        print(f"gpu within 1e-3: {sum(x['gpu_kl'] <= 1e-3 for x in lines)}; within its case's "
              f"largest draw: {sum(x['gpu_kl'] <= x['floor_max'] for x in lines)}")


if __name__ == "__main__":
    main()
