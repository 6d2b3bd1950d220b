"""Llamas sharing one context (seq_batch.py): concurrent greedy completions from
several threads give the texts each gives alone, and the decode calls really
merge into shared steps; a bad call fails alone; the views close the context."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from pyllamakv import errors
from pyllamakv.core.native import Model
from pyllamakv.llama import Llama
from pyllamakv.engine.seq_batch import SharedContext
from _smollm2 import require_model_path

PROMPTS = ["The capital of France is", "1, 2, 3, 4,", "Once upon a time", "def add(a, b):"]


@pytest.fixture
def model():   # per test: a Llama given _model closes it when collected
    path = require_model_path()
    with Model(path, "cpu", 2) as m:
        yield path, m


def _llama(path, m, **kw):
    return Llama(path, _model=m, n_ctx=128, n_threads=1, device="cpu", **kw)


def test_concurrent_equals_alone(model):
    path, m = model
    alone = _llama(path, m)
    want = [alone.create_completion(p, max_tokens=10, temperature=0)["choices"][0]["text"]
            for p in PROMPTS]
    alone._ctx.close()
    shared = SharedContext(len(PROMPTS))
    slots = [_llama(path, m, _context=shared.context, kv_pool_mib=1) for _ in PROMPTS]
    steps = []
    real = shared.ctx.decode_batch_logits

    def counting(toks, seqs, want_logits=None):
        if not steps:   # hold the first step until every slot's prompt waits: the next one
            deadline = time.monotonic() + 60   # must then take the other three together
            while len(shared.batcher._pending) < len(PROMPTS) and time.monotonic() < deadline:
                time.sleep(0.01)
        steps.append(len(set(seqs)))
        return real(toks, seqs, want_logits)
    shared.ctx.decode_batch_logits = counting
    got = [None] * len(PROMPTS)
    barrier = threading.Barrier(len(PROMPTS))

    def run(i):
        barrier.wait()
        for _ in range(2):   # twice: the second reuses the cached prompt prefix
            got[i] = slots[i].create_completion(PROMPTS[i], max_tokens=10,
                                                temperature=0)["choices"][0]["text"]
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert got == want
    assert steps[1] >= len(PROMPTS) - 1, f"sequences per step: {steps}"
    stats = slots[0].kv_stats()
    assert stats["streaming"] == 1 and stats["pool_bytes"] > 0
    with pytest.raises(errors.ContextFullError):
        slots[1]._ctx.decode(list(range(200)))
    with pytest.raises(errors.ParameterError):
        slots[1]._ctx.decode([m.n_vocab])
    assert slots[2].create_completion(PROMPTS[2], max_tokens=10,
                                      temperature=0)["choices"][0]["text"] == want[2]
    for s in slots:
        s._ctx.close()
    assert shared.ctx._ptr is None   # the last view closed the context


def test_shared_context_bounds(model):
    path, m = model
    shared = SharedContext(1)
    shared.context(m, n_ctx=32, n_threads=1)
    with pytest.raises(errors.ParameterError, match="all given"):
        shared.context(m, n_ctx=32, n_threads=1)
    with pytest.raises(errors.ParameterError):
        SharedContext(0)
    rng = np.random.default_rng()
    shared2 = SharedContext(2)
    a, b = shared2.context(m, n_ctx=64, n_threads=1), shared2.context(m, n_ctx=64, n_threads=1)
    toks = rng.integers(0, m.n_vocab, 20).tolist()
    a.decode(toks, n_logits=3)
    b.decode(toks[:5])
    assert a.logits().shape == (3, m.n_vocab) and b.logits().shape == (1, m.n_vocab)
    assert np.array_equal(a.logits()[0], a.logits()[0]) and (a.n_tokens, b.n_tokens) == (20, 5)
    a.truncate(4)
    assert a.n_tokens == 4 and b.n_tokens == 5
    a.close()
    b.close()
