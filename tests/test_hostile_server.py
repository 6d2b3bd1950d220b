"""A hostile model or engine must not freeze or mislead the server (issue 38):
`serve` on a crafted GGUF whose vocab makes the tokenizers library panic
answers every request with an error at once, /health keeps answering, and a
slot worker that dies is replaced and counted, never left behind an idle slot."""
from __future__ import annotations

import random
import threading

import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFValueType as V

from _server import InProcess, Subprocess, need_server_deps

need_server_deps()

import httpx  # noqa: E402

from fixtures import gguf_craft as gc  # noqa: E402
from pyllamakv.server import ServerSettings, create_app  # noqa: E402
from pyllamakv.server.slots import SlotPool  # noqa: E402
from fixtures.tiny_models import write_tiny_model  # noqa: E402


class Panic(BaseException):
    """What pyo3's PanicException is: not an Exception."""


class Flaky:
    """An engine that panics, or exits its thread, on chosen prompts."""

    model_path = "stand-in.gguf"

    def n_ctx(self):
        return 64

    def create_completion(self, prompt, stream=False, model=None, max_tokens=None, **kw):
        if prompt == "panic":
            raise Panic("range end index 2 out of range")
        if prompt == "exit":
            raise SystemExit(3)
        return {"choices": [{"text": "ok", "finish_reason": "length", "index": 0}],
                "object": "text_completion"}


@pytest.fixture
def flaky():
    pool = SlotPool([Flaky(), Flaky()], queue_size=4)
    server = InProcess(create_app(ServerSettings(parallel=2, queue_size=4, timeout_s=30), pool))
    yield server, pool
    server.stop()
    pool.close()


def _complete(url, prompt):
    return httpx.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": 2},
                      timeout=20)


@pytest.mark.parametrize("prompt", ["panic", "exit"])
def test_a_dying_request_fails_at_once_and_the_slots_go_on(flaky, prompt):
    server, pool = flaky
    for _ in range(random.randrange(2, 5)):
        r = _complete(server.url, prompt)
        assert r.status_code == 500, r.text
        assert "ForeignLibraryError" in r.json()["error"]["message"]
    outs = []
    threads = [threading.Thread(target=lambda: outs.append(_complete(server.url, "hi")))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.status_code for r in outs] == [200] * 4
    h = httpx.get(server.url + "/health").json()
    assert h["slots_idle"] == 2 and h["slots_busy"] == 0
    assert all(t.is_alive() for t in pool._threads)
    if prompt == "exit":
        assert h["slot_restarts"] >= 1
    else:
        assert h["slot_restarts"] == 0


def test_serve_on_a_vocab_that_panics_the_tokenizer(tmp_path):
    spec = gc.read_spec(write_tiny_model(tmp_path / "plain.gguf", "llama", T.Q8_0, n_vocab=2,
                                         n_embd=64, n_layer=1, n_head=2, n_head_kv=1, n_ff=64))
    spec.set("tokenizer.ggml.model", V.STRING, "gpt2")
    spec.set("tokenizer.ggml.pre", V.STRING, "default")
    spec.set("tokenizer.ggml.tokens", V.ARRAY, ["a", "b"], V.STRING)
    spec.set("tokenizer.ggml.token_type", V.ARRAY, [1, 1], V.INT32)
    spec.set("tokenizer.ggml.merges", V.ARRAY, ["a b"], V.STRING)
    spec.set("tokenizer.ggml.eos_token_id", V.UINT32, 1)
    path = gc.write(spec, tmp_path / "panic.gguf")
    server = Subprocess(str(path), "--parallel", "2", "--ctx", "64", "--timeout", "20",
                        "--threads", "1")
    try:
        for _ in range(3):
            r = _complete(server.url, "ab" * random.randrange(1, 20))
            assert r.status_code == 500, r.text
            assert "tokenizers" in r.text
            h = httpx.get(server.url + "/health", timeout=5)
            assert h.status_code == 200 and h.json()["slots_busy"] == 0
        assert server.proc.poll() is None
    finally:
        server.stop()


def test_serve_with_a_quadratic_template_keeps_health_and_other_slots(tmp_path):
    """Old code: jinja's |urlize on one long word ran for minutes in one call
    holding the GIL: /health and the other slot stopped answering."""
    spec = gc.read_spec(gc.write_tiny_spm_llama(tmp_path))
    spec.set("tokenizer.chat_template", V.STRING,
             "{% for m in messages %}{{ m.content|urlize }}{% endfor %}")
    path = gc.write(spec, tmp_path / "urlize.gguf")
    server = Subprocess(str(path), "--parallel", "2", "--ctx", "128", "--timeout", "30",
                        "--threads", "1")
    try:
        word = "." * (40_000 + random.randrange(1000)) + "a."
        out = {}

        def attack():
            out["r"] = httpx.post(server.url + "/v1/chat/completions", timeout=120, json={
                "messages": [{"role": "user", "content": word}], "max_tokens": 2})
        t = threading.Thread(target=attack)
        t.start()
        for _ in range(5):
            assert httpx.get(server.url + "/health", timeout=5).status_code == 200
            r = httpx.post(server.url + "/v1/completions", timeout=30,
                           json={"prompt": "ab", "max_tokens": 2})
            assert r.status_code == 200, r.text
        t.join(60)
        assert not t.is_alive()
        assert out["r"].status_code in (200, 400), out["r"].text
    finally:
        server.stop()
