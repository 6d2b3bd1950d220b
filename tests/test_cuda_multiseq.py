"""Several sequences in one context on CUDA (skipped without a GPU): with the
exact kernels (gpu_kernels="exact") each sequence's logits are bit-identical
to that sequence decoded alone on CUDA, over random scripts (joins, leaves,
truncate / copy / reset in the middle) and several pool sizes; with the fast
kernels the pool size still changes no bit, and batched against alone stays
close (near-ties may differ: figures in the messages); the batched CUDA run
against the batched CPU run by top-1 agreement."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from pyllamakv import _native as N
from pyllamakv._native import Model, row_bytes
from multiseq_script import compare, context_factory, make_script, run_alone, run_batched
from tiny_models import write_tiny_model
from _smollm2 import model_path

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(N.cuda_device_count() == 0, reason="no CUDA device")]

CHUNK = 16


def _min_pool(m, chunk=CHUNK):
    hp = m.hparams
    return 2 * chunk * 2 * row_bytes("f16", hp["n_head_kv"] * hp["head_dim"])


def _models(tmp_path):
    path = write_tiny_model(tmp_path / "tiny.gguf", "qwen3", T.Q8_0, n_layer=3)
    yield "tiny qwen3", path
    if model_path() is not None:
        yield "SmolLM2", model_path()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_cuda_exact_batched_equals_alone(tmp_path, seed):
    rng = np.random.default_rng(seed)
    for name, path in _models(tmp_path):
        with Model(path, device="cuda") as m:
            n_seq, n_ctx, n_batch = 4, 192, 64
            events = make_script(rng, n_seq, m.n_vocab, n_ctx, n_batch, 30)
            kw = dict(n_ctx=n_ctx, n_batch=n_batch, n_ubatch=16, kv_chunk=CHUNK,
                      gpu_kernels="exact")
            alone = run_alone(context_factory(m, **kw), events, n_seq, n_batch)
            mn = _min_pool(m)
            for pool in (None, n_seq * mn, n_seq * mn * 4 + 4096):
                batched = run_batched(context_factory(m, kv_pool_bytes=pool, **kw), events, n_seq)
                compare(batched, alone, f"CUDA exact, {name}, seed {seed}, pool {pool}")


def test_cuda_fast_pool_independent_and_close(tmp_path):
    rng = np.random.default_rng(7)
    for name, path in _models(tmp_path):
        with Model(path, device="cuda") as m:
            n_seq, n_ctx, n_batch = 4, 192, 64
            events = make_script(rng, n_seq, m.n_vocab, n_ctx, n_batch, 30)
            kw = dict(n_ctx=n_ctx, n_batch=n_batch, n_ubatch=16, kv_chunk=CHUNK,
                      gpu_kernels="fast")
            ref = run_batched(context_factory(m, **kw), events, n_seq)
            for pool in (n_seq * _min_pool(m), n_seq * _min_pool(m) * 4 + 4096):
                got = run_batched(context_factory(m, kv_pool_bytes=pool, **kw), events, n_seq)
                compare(got, ref, f"CUDA fast, {name}, pool {pool} against no bound")
            alone = run_alone(context_factory(m, **kw), events, n_seq, n_batch)
            worst, agree, total = 0.0, 0, 0
            for b, a in zip(ref, alone):
                for x, y in zip(b, a):
                    worst = max(worst, float(np.max(np.abs(x - y))))
                    agree += int(np.sum(x.argmax(-1) == y.argmax(-1)))
                    total += len(x)
            assert agree >= 0.97 * total and worst < 0.5, (
                f"CUDA fast, {name}: batched vs alone top-1 agreement {agree}/{total}, "
                f"max |diff| {worst:.3g}")


def test_cuda_batched_against_cpu(tmp_path):
    rng = np.random.default_rng(11)
    path = write_tiny_model(tmp_path / "tiny.gguf", "llama", T.Q8_0, n_layer=2)
    n_seq, n_ctx, n_batch = 3, 128, 48
    kw = dict(n_ctx=n_ctx, n_batch=n_batch, n_ubatch=16, kv_chunk=CHUNK, gpu_kernels="exact")
    with Model(path, device="cuda") as g, Model(path) as c:
        events = make_script(rng, n_seq, g.n_vocab, n_ctx, n_batch, 20)
        mn = _min_pool(g)
        gpu = run_batched(context_factory(g, kv_pool_bytes=n_seq * mn, **kw), events, n_seq)
        cpu = run_batched(context_factory(c, kv_pool_bytes=n_seq * mn, **kw), events, n_seq)
    agree = total = 0
    worst = 0.0
    for b, a in zip(gpu, cpu):
        for x, y in zip(b, a):
            worst = max(worst, float(np.max(np.abs(x - y))))
            agree += int(np.sum(x.argmax(-1) == y.argmax(-1)))
            total += len(x)
    assert agree >= 0.97 * total, (f"CUDA vs CPU batched: top-1 agreement {agree}/{total}, "
                                   f"max |diff| {worst:.3g}")
