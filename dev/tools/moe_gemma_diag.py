"""Device diagnostic (dev only): where the CUDA logits of the tiny MoE and gemma3
models part from the CPU's. Per-row KL (prefill rows then decode rows), for
qwen3moe f32 with k = 2 of 8 and with every expert used (no routing choice),
exact kernels, and for gemma3 with the graph on and off."""
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from fixtures.gpu_cases import engine_logits, kl_rows   # noqa: E402
from fixtures.tiny_moe import write_tiny_qwen3moe, write_tiny_qwen35moe   # noqa: E402
from fixtures.tiny_gemma3 import write_tiny_gemma3   # noqa: E402
from gguf import GGMLQuantizationType as T   # noqa: E402

d = Path(tempfile.mkdtemp())
rng = np.random.default_rng(100)
toks = [int(t) for t in rng.integers(4, 300, 120)]


def show(name, path, kernels="exact"):
    cpu = engine_logits(path, toks, device="cpu", gpu_kernels=kernels)
    gpu = engine_logits(path, toks, device="cuda", gpu_kernels=kernels)
    kl = kl_rows(cpu, gpu)
    print(f"{name} {kernels}: mean KL {kl.mean():.2e}; rows > 1e-4: {np.flatnonzero(kl > 1e-4).tolist()[:40]}; "
          f"max |diff| row 0 {np.abs(cpu[0] - gpu[0]).max():.2e}, first 5 rows KL {np.round(kl[:5], 8).tolist()}",
          flush=True)


for used in (2, 8):
    show(f"qwen3moe f32 used {used}", write_tiny_qwen3moe(d / f"m{used}.gguf", T.F32, seed=0, n_layer=4, n_used=used))
show("qwen3moe f32 1 layer", write_tiny_qwen3moe(d / "m1l.gguf", T.F32, seed=0, n_layer=1))
show("qwen35moe q8_0", write_tiny_qwen35moe(d / "q35.gguf", T.Q8_0, seed=0, n_layer=4))
try:
    g = write_tiny_gemma3(d / "g.gguf", T.F32, seed=0)
except TypeError:
    g = write_tiny_gemma3(d / "g.gguf", T.F32)
for graph in ("1", "0"):
    os.environ["LKV_CUDA_GRAPH"] = graph
    show(f"gemma3 f32 graph={graph}", g)
