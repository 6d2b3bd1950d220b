"""The slot pool and the app's queueing, with stand-in engines (no model needed).

A stand-in engine streams one chunk per token and waits on an event between
tokens, so the tests decide when a slot is busy: a full queue answers 503
with Retry-After; a queued request whose client leaves never runs; the
pool closes with jobs running and waiting.
"""
import asyncio
import threading
import time

import pytest

from _server import InProcess, need_server_deps

need_server_deps()
import httpx  # noqa: E402

from pyllamakv.server import ServerSettings, create_app  # noqa: E402
from pyllamakv.server.slots import Job, JobStopped, QueueFull, SlotPool  # noqa: E402


class Gate:
    """An engine whose completions yield one chunk each time the gate opens."""

    model_path = "stand-in.gguf"

    def __init__(self):
        self.step = threading.Semaphore(0)
        self.started = threading.Semaphore(0)
        self.calls = 0

    def n_ctx(self):
        return 64

    def create_completion(self, prompt, stream=False, model=None, max_tokens=None, **kw):
        self.calls += 1
        if prompt == "boom":
            raise RuntimeError("engine failure")
        self.started.release()

        def chunks():
            for i in range(max_tokens or 3):
                assert self.step.acquire(timeout=30)
                yield {"id": "x", "object": "text_completion", "created": 0, "model": model,
                       "choices": [{"text": f"t{i}", "index": 0, "logprobs": None,
                                    "finish_reason": "length" if i + 1 == max_tokens else None}]}
        if stream:
            return chunks()
        return {"choices": [{"text": "".join(c["choices"][0]["text"] for c in chunks()),
                             "finish_reason": "length"}], "object": "text_completion"}


@pytest.fixture
def gate_server():
    gate = Gate()
    pool = SlotPool([gate], queue_size=1)
    server = InProcess(create_app(ServerSettings(parallel=1, queue_size=1), pool))
    yield server, pool, gate
    for _ in range(100):
        gate.step.release()
    server.stop()
    pool.close()


def test_full_queue_answers_503_and_recovers(gate_server):
    server, pool, gate = gate_server
    url = server.url + "/v1/completions"
    body = {"prompt": "a", "max_tokens": 2}
    with httpx.Client(timeout=30) as c:
        results = {}
        first = threading.Thread(target=lambda: results.setdefault(1, c.post(url, json=body)))
        first.start()
        assert gate.started.acquire(timeout=10)          # the slot is busy
        second = threading.Thread(target=lambda: results.setdefault(2, c.post(url, json=body)))
        second.start()
        t_end = time.monotonic() + 10
        while pool.queue_length < 1 and time.monotonic() < t_end:
            time.sleep(0.01)
        assert pool.queue_length == 1                    # and the queue is full
        r = c.post(url, json=body)
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["code"] == "queue_full"
        for _ in range(4):
            gate.step.release()
        first.join(30), second.join(30)
        assert [results[i].json()["choices"][0]["text"] for i in (1, 2)] == ["t0t1", "t0t1"]
        for _ in range(2):
            gate.step.release()
        assert c.post(url, json=body).status_code == 200  # serving again


def test_queued_requests_leave_on_time_limit_and_disconnect(gate_server):
    server, pool, gate = gate_server
    url = server.url + "/v1/completions"
    with httpx.Client(timeout=30) as c:
        holder = threading.Thread(target=lambda: c.post(url, json={"prompt": "a",
                                                                 "max_tokens": 1}))
        holder.start()
        assert gate.started.acquire(timeout=10)          # the slot is busy
        r = c.post(url, json={"prompt": "a", "timeout": 0.3})
        assert r.status_code == 503 and r.json()["error"]["code"] == "timeout"
        assert r.headers["retry-after"] == "1" and pool.queue_length == 0
        with pytest.raises(httpx.ReadTimeout):          # the client gives up while queued
            httpx.post(url, json={"prompt": "a"}, timeout=0.5)
        t_end = time.monotonic() + 10
        while pool.queue_length and time.monotonic() < t_end:
            time.sleep(0.02)
        assert pool.queue_length == 0                    # its place is free again
        gate.step.release()
        holder.join(30)
    assert gate.calls == 1                               # neither queued request ran


def test_engine_failure_is_500_and_the_slot_goes_on(gate_server):
    server, _, gate = gate_server
    r = httpx.post(server.url + "/v1/completions", json={"prompt": "boom"})
    assert r.status_code == 500 and "engine failure" in r.json()["error"]["message"]
    for _ in range(2):
        gate.step.release()
    r = httpx.post(server.url + "/v1/completions", json={"prompt": "a", "max_tokens": 2})
    assert r.status_code == 200


def _job(loop, fn, timeout_s=30.0):
    return Job(fn, loop, timeout_s)


def test_prompt_list_runs_on_free_slots_at_once():
    """Two prompts on two slots: both start before either produces a token (the old
    path ran a list on one slot, one prompt after the other); choices come back in order."""
    gates = [Gate(), Gate()]
    pool = SlotPool(gates, queue_size=2)
    server = InProcess(create_app(ServerSettings(parallel=2, queue_size=2), pool))
    try:
        with httpx.Client(timeout=60) as http:
            body = {"prompt": ["a", "b"], "max_tokens": 2, "n": 2}
            box = {}
            t = threading.Thread(target=lambda: box.update(
                r=http.post(server.url + "/v1/completions", json=body)))
            t.start()
            for g in gates:
                assert g.started.acquire(timeout=30), "a slot never started its prompt"
            for _ in range(40):
                for g in gates:
                    g.step.release()
            t.join(60)
        r = box["r"]
        assert r.status_code == 200, r.text
        assert [c["index"] for c in r.json()["choices"]] == [0, 1, 2, 3]
        assert sum(g.calls for g in gates) == 4
    finally:
        for g in gates:
            for _ in range(100):
                g.step.release()
        server.stop()
        pool.close()


def test_pool_skips_cancelled_and_expired_jobs_and_closes():
    gate = Gate()
    pool = SlotPool([gate], queue_size=4)
    loop = asyncio.new_event_loop()
    try:
        def run(engine, job):
            yield from engine.create_completion("a", stream=True, max_tokens=1)
        running, cancelled, expired, waiting = (_job(loop, run), _job(loop, run),
                                                _job(loop, run, 1e-3), _job(loop, run))
        pool.submit(running)
        assert gate.started.acquire(timeout=10)
        for j in (cancelled, expired, waiting):
            pool.submit(j)
        cancelled.cancel()
        time.sleep(0.01)
        gate.step.release()                          # running ends; then the queue drains
        assert gate.started.acquire(timeout=10)      # only `waiting` starts: calls == 2
        with pytest.raises(QueueFull):
            for _ in range(5):
                pool.submit(_job(loop, run))
        closing = threading.Thread(target=pool.close)  # fails the queued, cancels `waiting`
        closing.start()
        while not pool._closed:
            time.sleep(0.001)
        gate.step.release()                          # lets `waiting` reach its next token
        closing.join(10)
        assert not closing.is_alive() and gate.calls == 2
        got = {}
        for name, j in (("cancelled", cancelled), ("expired", expired)):
            kind, value = loop.run_until_complete(j.get())
            got[name] = (kind, str(value))
        assert got["cancelled"][0] == got["expired"][0] == "error"
        assert "timed out" in got["expired"][1] and "cancelled" in got["cancelled"][1]
        with pytest.raises(RuntimeError):
            pool.submit(_job(loop, run))
    finally:
        for _ in range(10):
            gate.step.release()
        pool.close()
        loop.close()


def test_settings_are_checked():
    for bad in (dict(parallel=0), dict(port=70000), dict(timeout_s=0), dict(n_ctx=True),
                dict(kv_pool_mib=-1), dict(kv_pool_mib="auto", parallel=2),
                dict(gpu_memory_mib=0), dict(api_key="")):
        with pytest.raises(ValueError):
            ServerSettings(**bad)
    s = ServerSettings(parallel=4, kv_pool_mib=64)
    assert s.slot_pool_mib == 16 and s.threads_per_slot >= 1


def test_serve_command_checks_its_options():
    from click.testing import CliRunner
    from pyllamakv.commands.cli import main
    r = CliRunner().invoke(main, ["serve", "--help"])
    assert r.exit_code == 0 and "--parallel" in r.output and "--api-key" in r.output
    r = CliRunner().invoke(main, ["serve", "--parallel", "0"])
    assert r.exit_code == 1 and "parallel must be an int >= 1" in r.output
    r = CliRunner().invoke(main, ["serve", "--kv-pool-mib", "lots"])
    assert r.exit_code == 2 and "neither a number of MiB nor 'auto'" in r.output
    import inspect
    from pyllamakv import Llama
    if "gpu_memory_mib" not in inspect.signature(Llama.__init__).parameters:
        r = CliRunner().invoke(main, ["serve", "--gpu-memory-mib", "512"])
        assert r.exit_code == 1 and "takes no gpu_memory_mib" in r.output
