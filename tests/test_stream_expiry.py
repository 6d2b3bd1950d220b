"""An abandoned but still referenced stream must not block other threads'
calls on its Llama forever (issue 38, engine/guard.py)."""
from __future__ import annotations

import random
import threading
import time

import pytest

from pyllamakv.engine import guard as guard_mod
from pyllamakv.engine.guard import Guard
from pyllamakv.errors import StreamExpiredError


def test_a_waiter_closes_an_idle_stream_and_goes_on():
    g = Guard("thing", stream_idle_s=0.3)
    cleaned = []

    def gen():
        try:
            for i in range(100):
                yield i
        finally:
            cleaned.append(True)

    holder: dict = {}

    def open_and_abandon():
        holder["s"] = g.stream(gen)
        holder["first"] = next(holder["s"])

    t = threading.Thread(target=open_and_abandon)
    t.start()
    t.join()
    assert holder["first"] == 0
    value = random.random()
    done = threading.Event()
    result = []
    w = threading.Thread(target=lambda: (result.append(g.call(lambda: value)), done.set()))
    w.start()
    assert done.wait(30), "the waiting call never ran"
    assert result == [value] and cleaned == [True]
    with pytest.raises(StreamExpiredError, match="idle"):
        next(holder["s"])
    with pytest.raises(StopIteration):
        next(holder["s"])


def test_an_active_stream_is_not_expired():
    g = Guard("thing", stream_idle_s=0.5)
    s = g.stream(lambda: iter(range(10**6)))
    got = []
    w = threading.Thread(target=lambda: got.append(g.call(lambda: "ran")))
    w.start()
    t_end = time.monotonic() + 1.5
    n = 0
    while time.monotonic() < t_end:       # steps well inside the idle limit
        next(s)
        n += 1
        time.sleep(0.01)
    assert got == []                      # still waiting: the stream is in use
    s.close()
    w.join(10)
    assert got == ["ran"]


def test_llama_stream_abandoned_in_another_thread(monkeypatch):
    from _smollm2 import require_model_path
    from pyllamakv import Llama
    monkeypatch.setattr(guard_mod, "STREAM_IDLE_S", 0.5)
    with Llama(require_model_path(), n_ctx=128, seed=1, verbose=False) as llm:
        keep = []
        t = threading.Thread(target=lambda: keep.append(
            llm.create_completion("Once upon a time", max_tokens=20, stream=True)))
        t.start()
        t.join()
        next(keep[0])                       # opened, one chunk taken, then forgotten
        out = []
        w = threading.Thread(target=lambda: out.append(llm("Hello", max_tokens=3)))
        w.start()
        w.join(60)
        assert out and out[0]["choices"][0]["text"] is not None
        with pytest.raises(StreamExpiredError):
            for _ in keep[0]:
                pass
