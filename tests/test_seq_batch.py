"""Llamas sharing one engine (engine/engine.py: the server's slots): concurrent
greedy completions from several threads give the texts each gives alone, and
the decode calls really merge into shared steps (engine/scheduler.py); a bad
call fails alone; the last Llama closed frees the context."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from pyllamakv import errors
from pyllamakv.core.native import Model
from pyllamakv.llama import Llama
from pyllamakv.engine.engine import Engine
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
    alone.engine.close()
    shared = Engine(len(PROMPTS), shared=True)
    # one pool for every slot, given once (4 sequences of 128 tokens would take ~11 MiB)
    slots = [_llama(path, m, _engine=shared, n_seq_max=len(PROMPTS), kv_pool_mib=4)
             for _ in PROMPTS]
    steps = []
    real = shared.ctx.decode_batch_logits
    queued = []
    real_submit = shared.scheduler.submit

    def submit(*a):
        queued.append(a[0])
        return real_submit(*a)

    def counting(toks, seqs, want_logits=None):
        if not steps:   # hold the first step until every slot's prompt waits: the next one
            deadline = time.monotonic() + 60   # must then take the other three together
            while len(queued) < len(PROMPTS) and time.monotonic() < deadline:
                time.sleep(0.01)
        steps.append(len(set(seqs.tolist())))
        return real(toks, seqs, want_logits)
    shared.scheduler.submit = submit
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
    assert shared.ctx.kv_stats()["pool_bytes"] <= 4 << 20   # the pool given, not 4 times it
    with pytest.raises(errors.ContextFullError):
        slots[1].sequence.eval(list(range(200)))
    with pytest.raises(errors.ParameterError):
        slots[1].sequence.eval([m.n_vocab])
    assert slots[2].create_completion(PROMPTS[2], max_tokens=10,
                                      temperature=0)["choices"][0]["text"] == want[2]
    for s in slots:
        s.close()
    with pytest.raises(errors.ClosedError):   # the last Llama closed the context
        shared.ctx.n_tokens


def test_shared_engine_bounds(model):
    path, m = model
    one = Engine(1, shared=True)
    one.open(m, n_ctx=32, n_threads=1)
    with pytest.raises(errors.ParameterError, match="all given"):
        one.open(m, n_ctx=32, n_threads=1)
    with pytest.raises(errors.ParameterError):
        Engine(0)
    rng = np.random.default_rng()
    two = Engine(2, shared=True)
    a, b = two.open(m, n_ctx=64, n_threads=1), two.open(m, n_ctx=64, n_threads=1)
    toks = rng.integers(0, m.n_vocab, 20).tolist()
    rows = a.eval_rows(toks[:3])
    a.eval(toks[3:])
    b.eval(toks[:5])
    assert rows.shape == (3, m.n_vocab) and b.last_logits().shape == (m.n_vocab,)
    assert (a.n, b.n) == (20, 5) and list(a.input_ids()) == toks
    a.truncate(4)
    assert a.n == 4 and b.n == 5
    two.release(a)
    two.release(b)
    with pytest.raises(errors.ClosedError):
        two.ctx.n_tokens
