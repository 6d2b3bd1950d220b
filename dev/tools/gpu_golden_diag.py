"""The golden prompts on the CPU and on the GPU (run on the GPU machine with
the full SmolLM2 importable, as the golden stage of tools/gpu-run.sh does):
per prompt, how many logit rows are bit-identical and each device's top-1 /
KL against llama.cpp's golden data."""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests"))
from fixtures.golden import GOLDEN, score  # noqa: E402
from pyllamakv.default_model import default_model_path as _model_path  # noqa: E402
from pyllamakv.core.native import Context, Model  # noqa: E402

golden = json.loads((GOLDEN / "smollm2_teacher_forced.json").read_text())
out = {}
for dev in ("cpu", "cuda"):
    with Model(_model_path(), device=dev) as m:
        for name, entry in golden.items():
            with Context(m, n_ctx=512, logits_all=True, n_threads=2) as c:
                c.decode(entry["prompt_tokens"] + entry["greedy"])
                out[dev, name] = c.logits().copy()
for name, entry in golden.items():
    a, b = out["cpu", name], out["cuda", name]
    same = int(np.sum(np.all(a == b, axis=1)))
    sa, sb = score(a, entry), score(b, entry)
    first = next((i for i in range(len(a)) if not np.array_equal(a[i], b[i])), None)
    print(f"{name[:24]!r}: rows bit-identical {same}/{len(a)} (first differing row {first}), "
          f"max diff {np.abs(a - b).max():.2e}; top-1 cpu {np.mean(sa[0]):.3f} gpu {np.mean(sb[0]):.3f}, "
          f"KL cpu {np.mean(sa[1]):.5f} gpu {np.mean(sb[1]):.5f}", flush=True)
