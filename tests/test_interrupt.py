"""KeyboardInterrupt at random points of prefill and generation: Python and C
agree afterwards, the next call works and gives the logits of a fresh context,
and a long prefill answers the interrupt long before it would have finished."""
import _thread
import os
import signal
import threading
import time

import numpy as np
import pytest

from _smollm2 import require_model_path
from fixtures.tiny_models import write_tiny_model

from pyllamakv import errors


def _interrupt(kind: str) -> None:
    if kind == "signal":
        os.kill(os.getpid(), signal.SIGINT)
    else:
        _thread.interrupt_main()


def _run_interrupted(fn, delay: float, kind: str) -> bool:
    """fn() with an interrupt after delay seconds; True if it was interrupted
    inside fn (False: fn finished first and the interrupt came after it)."""
    fired = threading.Event()
    timer = threading.Timer(delay, lambda: (_interrupt(kind), fired.set()))
    inside = False
    try:
        timer.start()          # inside the try: a short delay can land the interrupt here
        try:
            fn()
        except KeyboardInterrupt:
            inside = True
        if not inside:
            fired.wait()
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < 30:   # the pending interrupt lands here
                time.sleep(0.002)
            raise AssertionError("the interrupt never arrived")
    except KeyboardInterrupt:
        pass
    timer.join()
    return inside


@pytest.fixture(autouse=True)
def _sigint_raises():
    """Python's own SIGINT handler for these tests: a run started in the
    background of a non-interactive shell inherits SIGINT ignored, and then no
    KeyboardInterrupt ever comes."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(write_tiny_model(tmp_path_factory.mktemp("intr") / "tiny.gguf", seed=5,
                                n_vocab=320, n_layer=4, vocab=True))


def _check_agrees(llm, ref, extra):
    """llm's bookkeeping matches its C cache, and the next eval gives ref's logits."""
    assert llm.n_tokens == llm._ctx.n_tokens == len(llm.input_ids)
    ids = [int(t) for t in llm.input_ids]
    llm.eval(extra)
    ref.reset()
    ref.eval(ids + extra)
    np.testing.assert_array_equal(llm.scores[-1], ref.scores[-1])
    assert [int(t) for t in llm.input_ids] == ids + extra


@pytest.mark.parametrize("pool", [None, "auto"])
def test_random_interrupts_leave_python_and_c_in_agreement(tiny, pool):
    from pyllamakv import Llama
    rng = np.random.default_rng(11)
    kw = dict(n_ctx=1024, n_batch=256, n_ubatch=64, n_threads=1, seed=3)
    with Llama(tiny, kv_pool_mib=pool, **kw) as llm, Llama(tiny, **kw) as ref:
        prompt = [int(t) for t in rng.integers(1, 320, 600)]

        def work():
            llm.reset()
            llm(prompt, max_tokens=40, temperature=0)
        t0 = time.perf_counter()
        work()
        dur = time.perf_counter() - t0
        hits = 0
        for i in range(30):
            hits += _run_interrupted(work, rng.uniform(0, dur * 1.1),
                                     "signal" if i % 2 else "interrupt_main")
            _check_agrees(llm, ref, [int(rng.integers(1, 320))])
        assert hits >= 10          # most tries landed inside the call


def test_core_abort_flag(tiny):
    """lkv_context_set_abort: a decode under the flag fails with AbortedError and
    changes nothing; cleared, the same decode gives a fresh context's logits."""
    from pyllamakv.core import native as _native
    from pyllamakv.core.ffi import lib
    m = _native.Model(tiny)
    c = _native.Context(m, n_ctx=64, n_threads=1)
    c.decode([1, 2, 3])
    lib.lkv_context_set_abort(c.ptr, 1)
    with pytest.raises(errors.AbortedError, match="aborted"):
        c.decode([4, 5, 6])
    assert c.n_tokens == 3
    lib.lkv_context_set_abort(c.ptr, 0)
    c.decode([4, 5, 6])
    fresh = _native.Context(m, n_ctx=64, n_threads=1)
    fresh.decode([1, 2, 3, 4, 5, 6])
    np.testing.assert_array_equal(c.logits()[-1], fresh.logits()[-1])


def test_long_prefill_answers_an_interrupt_quickly():
    path = require_model_path()
    from pyllamakv import Llama
    rng = np.random.default_rng(13)
    n = 1024
    with Llama(path, n_ctx=n + 16, n_batch=n, n_ubatch=512, seed=1) as llm:
        tokens = [int(t) for t in rng.integers(100, 40000, n)]
        t0 = time.perf_counter()
        llm.eval(tokens)
        full = time.perf_counter() - t0
        llm.reset()
        hit_at = []
        timer = threading.Timer(full / 4, lambda: (hit_at.append(time.perf_counter()),
                                                   _thread.interrupt_main()))
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            llm.eval(tokens)
            time.sleep(5)
        latency = time.perf_counter() - hit_at[0]
        timer.join()
        print(f"prefill of {n} tokens: {full:.2f} s; interrupt answered in {latency:.3f} s")
        assert latency < full / 4          # without the abort it would finish the prefill
        assert llm.n_tokens == 0           # the interrupted call changed nothing
        llm.eval(tokens[:20])
        with Llama(path, n_ctx=64, seed=1) as ref:
            ref.eval(tokens[:20])
            np.testing.assert_array_equal(llm.scores[-1], ref.scores[-1])
