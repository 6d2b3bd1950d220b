"""GPU vs CPU logits on tiny models under variants, to place a disagreement
(run on the GPU machine: python3 dev/tools/gpu_diag.py)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests"))
from fixtures.gpu_cases import write_tiny_model  # noqa: E402
from pyllamakv.core import native as N  # noqa: E402


def run(path, dev, toks, chunks, kv, n_batch=64, n_ubatch=32, kv_chunk=64):
    m = N.Model(path, device=dev)
    c = N.Context(m, n_ctx=512, n_batch=n_batch, n_ubatch=n_ubatch, type_k=kv, type_v=kv,
                  kv_chunk=kv_chunk, logits_all=True)
    rows, pos = [], 0
    n_pre = len(toks) if chunks[0] >= len(toks) else len(toks) * 2 // 3 if chunks[0] > 1 else 0
    while pos < len(toks):
        step = min(chunks[0], n_pre - pos) if pos < n_pre else chunks[1]
        c.decode(toks[pos:pos + step])
        rows.append(c.logits())
        pos += step
    out = np.concatenate(rows)
    del c, m
    return out


def report(name, cpu, gpu):
    d = np.abs(cpu - gpu).max(axis=1)
    exact = int(np.sum(np.all(cpu == gpu, axis=1)))
    print(f"{name}: top1 {np.mean(cpu.argmax(1) == gpu.argmax(1)):.3f} rows bit-identical "
          f"{exact}/{len(d)} max diff {d.max():.2e}; first rows {' '.join(f'{x:.1e}' for x in d[:6])}",
          flush=True)


for wtype in ["q4_0", "q8_0", "q4_1", "q5_1", "iq4_nl", "q4_k"]:
    path = f"/tmp/diag-{wtype}.gguf"
    write_tiny_model(path, "llama", wtype, seed=7)
    toks = [int(t) for t in np.random.default_rng(7).integers(0, 320, 48)]
    for kv in ["f32", "f16", "q8_0"]:
        for chunks in [(32, 1), (1, 1)]:
            report(f"{wtype} kv={kv} chunks={chunks}", run(path, "cpu", toks, chunks, kv),
                   run(path, "cuda", toks, chunks, kv))

real = os.environ.get("PYLLAMAKV_TEST_GGUF")
if real and os.path.exists(real):
    toks = [int(t) for t in np.random.default_rng(11).integers(0, 49152, 96)]
    for kv in ["f16", "q8_0"]:
        report(f"{os.path.basename(real)} kv={kv}", run(real, "cpu", toks, (32, 1), kv),
               run(real, "cuda", toks, (32, 1), kv))
    # the golden test's shape: the whole sequence in one micro-batch, chunk 256
    for nu, ch in [(512, 256), (512, 64), (32, 256)]:
        kw = dict(n_batch=512, n_ubatch=nu, kv_chunk=ch)
        report(f"{os.path.basename(real)} one call, n_ubatch={nu} kv_chunk={ch}",
               run(real, "cpu", toks, (96, 1), "f16", **kw), run(real, "cuda", toks, (96, 1), "f16", **kw))
