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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fixtures import gpu_cases as tc  # noqa: E402
from fixtures.noise import case_floor  # noqa: E402


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
            path, toks, kv = tc.tiny_case(Path(tmp), arch, wt)
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
