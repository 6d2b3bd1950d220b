"""Greedy outputs of concurrent server requests equal the sequential ones: the
default model and a tiny hybrid (qwen35: a recurrent state per sequence), the
slots sequences of one shared engine whose scheduler puts their work into
shared steps.
Fresh random prompts each run; the sequential answers come from the same
server, one request at a time."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from _server import InProcess, need_server_deps
from _smollm2 import require_model_path

need_server_deps()
import httpx  # noqa: E402

WORDS = ["the", "river", "one", "two", "green", "house", "def", "print", "(", ")", "1", "2",
         "cat", "sun", "blue", "code", "light", "in", "on", "and"]


def _serve(path, parallel, **kw):
    from pyllamakv.server import ServerSettings, create_app
    from pyllamakv.server.engines import load_engines
    from pyllamakv.server.slots import SlotPool
    settings = ServerSettings(path, parallel=parallel, queue_size=16, n_threads=1, **kw)
    pool = SlotPool(load_engines(settings), settings.queue_size)
    return InProcess(create_app(settings, pool)), pool


def _complete(url: str, prompt, max_tokens: int) -> list:
    r = httpx.post(f"{url}/v1/completions", timeout=300, json={
        "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": False})
    r.raise_for_status()
    c = r.json()["choices"][0]
    return [c["text"], c["finish_reason"]]


def _concurrent(url: str, prompts: list, max_tokens: int) -> list:
    got: list = [None] * len(prompts)
    barrier = threading.Barrier(len(prompts))

    def run(i: int) -> None:
        barrier.wait()
        try:
            got[i] = _complete(url, prompts[i], max_tokens)
        except Exception as e:   # shown in the comparison
            got[i] = repr(e)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    return got


def test_concurrent_equals_sequential_default_model():
    rng = np.random.default_rng()
    prompts = [" ".join(rng.choice(WORDS, int(rng.integers(3, 30)))) for _ in range(5)]
    server, pool = _serve(require_model_path(), 3, n_ctx=256)
    try:
        engines = {id(s.engine.engine) for s in pool.slots}
        assert len(engines) == 1, "the slots are sequences of one shared engine"
        sched = pool.slots[0].engine.engine.scheduler
        want = [_complete(server.url, p, 12) for p in prompts]
        steps0, multi0 = sched.steps, sched.multi_steps
        got = _concurrent(server.url, prompts, 12)
        assert got == want
        assert sched.steps > steps0
        print(f"steps {sched.steps - steps0}, of several sequences {sched.multi_steps - multi0}")
    finally:
        server.stop()
        pool.close()


def test_concurrent_equals_sequential_hybrid(tmp_path):
    from fixtures.tiny_qwen35 import write_tiny_qwen35
    path = write_tiny_qwen35(tmp_path / "q35.gguf")
    rng = np.random.default_rng()
    server, pool = _serve(str(path), 2, n_ctx=128)
    try:
        assert len({id(s.engine.engine) for s in pool.slots}) == 1, "one shared engine"
        n_vocab = pool.slots[0].engine.n_vocab()
        prompts = [rng.integers(0, n_vocab, int(rng.integers(2, 40))).tolist() for _ in range(4)]
        want = [_complete(server.url, p, 10) for p in prompts]
        got = _concurrent(server.url, prompts, 10)
        assert got == want
        # and again: each slot's cache now holds another prompt's prefix (or its own)
        assert _concurrent(server.url, prompts[::-1], 10) == want[::-1]
    finally:
        server.stop()
        pool.close()


if __name__ == "__main__":
    pytest.main([__file__, "-q", "-s"])
