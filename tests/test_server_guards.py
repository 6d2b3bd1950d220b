"""The server's guards against hostile clients (issue 38, server/guards.py):
Host headers on a loopback bind, non-JSON bodies, body size, JSON the parser
chokes on, the API key hiding /openapi.json and the pid, and connections:
a cap below the fd limit and a deadline for headers."""
from __future__ import annotations

import random
import socket
import threading
import time

import pytest

from _server import InProcess, _bound, need_server_deps, wait_healthy

need_server_deps()

import httpx  # noqa: E402

from pyllamakv.server import ServerSettings, create_app  # noqa: E402
from pyllamakv.server.guards import RateLimit, uvicorn_options  # noqa: E402
from pyllamakv.server.slots import SlotPool  # noqa: E402


class Echo:
    model_path = "stand-in.gguf"

    def n_ctx(self):
        return 64

    def create_completion(self, prompt, stream=False, model=None, max_tokens=None, **kw):
        return {"choices": [{"text": str(prompt)[:20], "finish_reason": "length", "index": 0}],
                "object": "text_completion"}


def _server(**settings):
    pool = SlotPool([Echo()], queue_size=4)
    return InProcess(create_app(ServerSettings(parallel=1, queue_size=4, **settings), pool)), pool


@pytest.fixture(scope="module")
def server():
    s, pool = _server()
    yield s
    s.stop()
    pool.close()


def _post(url, content, headers):
    return httpx.post(url + "/v1/completions", content=content, headers=headers, timeout=30)


def test_plain_json_request_works(server):
    r = httpx.post(server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded",
                                   "multipart/form-data; boundary=x", None])
def test_non_json_content_type_is_415(server, ctype):
    headers = {"content-type": ctype} if ctype else {}
    r = _post(server.url, b'{"prompt": "hi"}', headers)
    assert r.status_code == 415, r.text
    assert r.json()["error"]["param"] == "Content-Type"


@pytest.mark.parametrize("host", ["evil.example", "attacker.com:8080", "192.168.1.5", "10.0.0.1:80"])
def test_foreign_host_header_is_refused_on_loopback(server, host):
    r = httpx.post(server.url + "/v1/completions", json={"prompt": "hi"}, headers={"host": host})
    assert r.status_code == 403, r.text
    assert r.json()["error"]["param"] == "Host"
    assert httpx.get(server.url + "/health", headers={"host": host}).status_code == 403


@pytest.mark.parametrize("host", ["localhost:1234", "127.0.0.1", "[::1]:80", "127.5.0.1"])
def test_loopback_host_headers_pass(server, host):
    assert httpx.get(server.url + "/health", headers={"host": host}).status_code == 200


def test_host_allow_lets_a_name_through():
    s, pool = _server(host_allow=("my.box",))
    try:
        assert httpx.get(s.url + "/health", headers={"host": "my.box:80"}).status_code == 200
        assert httpx.get(s.url + "/health", headers={"host": "other.box"}).status_code == 403
    finally:
        s.stop()
        pool.close()


def test_body_over_the_limit_is_413():
    s, pool = _server(max_body_bytes=10_000)
    try:
        big = b'{"prompt": "' + b"a" * (10_000 + random.randrange(1000)) + b'"}'
        r = _post(s.url, big, {"content-type": "application/json"})
        assert r.status_code == 413, r.text

        def chunks():          # no Content-Length: chunked
            yield b'{"prompt": "'
            for _ in range(20):
                yield b"b" * 1000
            yield b'"}'
        r = _post(s.url, chunks(), {"content-type": "application/json"})
        assert r.status_code == 413, r.text
        small = httpx.post(s.url + "/v1/completions", json={"prompt": "x" * 100})
        assert small.status_code == 200
    finally:
        s.stop()
        pool.close()


@pytest.mark.parametrize("body", [
    b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"prompt": "a", "max_tokens": ' + b"7" * 5000 + b"}",
])
def test_json_the_parser_chokes_on_is_400(server, body):
    r = _post(server.url, body, {"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_json"


def test_logit_bias_key_that_is_a_digit_but_no_int_is_400(server):
    r = httpx.post(server.url + "/v1/completions",
                   json={"prompt": "a", "logit_bias": {"\u00b2": 1.0}})
    assert r.status_code == 400, r.text
    assert "logit_bias" in r.text


def test_api_key_closes_openapi_and_hides_the_pid(server):
    assert httpx.get(server.url + "/openapi.json").status_code == 200
    assert "pid" in httpx.get(server.url + "/health").json()
    s, pool = _server(api_key="k" + str(random.randrange(10**6)))
    try:
        assert httpx.get(s.url + "/openapi.json").status_code == 404
        h = httpx.get(s.url + "/health").json()
        assert h["status"] == "ok" and "pid" not in h
    finally:
        s.stop()
        pool.close()


# ---------------------------------------------------------------- connections

class _Uvicorn:
    def __init__(self, app, **options):
        import uvicorn
        self.sock = _bound()
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                                    timeout_graceful_shutdown=2, **options))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       daemon=True)
        self.thread.start()
        wait_healthy(self.url, 30)

    def stop(self):
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()


def test_slow_clients_are_capped_and_timed_out():
    pool = SlotPool([Echo()], queue_size=4)
    app = create_app(ServerSettings(parallel=1, queue_size=4), pool)
    cap = 8 + random.randrange(4)
    srv = _Uvicorn(app, **uvicorn_options(cap, header_timeout_s=1.0))
    slow = []
    try:
        for _ in range(cap * 3):      # slowloris: half a request line each, never finished
            c = socket.create_connection(("127.0.0.1", srv.port))
            c.sendall(b"GET /hea")
            slow.append(c)
        # over the cap, connections are closed at once; after the header deadline, all of them
        time.sleep(3.5)
        closed = 0
        for c in slow:
            c.settimeout(2)
            try:
                closed += c.recv(1) == b""
            except (ConnectionResetError, socket.timeout):
                closed += 1
        assert closed == len(slow)
        assert httpx.get(srv.url + "/health", timeout=10).status_code == 200
    finally:
        for c in slow:
            c.close()
        srv.stop()
        pool.close()


def test_log_rate_limit_drops_floods():
    import logging
    f = RateLimit(burst=5, window_s=60)
    rec = logging.LogRecord("uvicorn.error", logging.WARNING, "", 0, "x", (), None)
    assert sum(f.filter(rec) for _ in range(1000)) == 5


@pytest.mark.parametrize("field,value", [
    ("response_format", {"type": "json_object"}), ("grammar", 'root ::= "a"'),
    ("json_schema", {"type": "object"}), ("mirostat", 2), ("tfs_z", 0.9),
])
def test_fields_the_server_does_not_honour_are_refused_by_name(server, field, value):
    from pyllamakv.server.schemas import CompletionRequest
    from pyllamakv.server.unhonoured import FIELDS
    if field in CompletionRequest.model_fields:
        pytest.skip(f"{field} is honoured now")
    assert field in FIELDS
    r = httpx.post(server.url + "/v1/completions", json={"prompt": "a", field: value})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == field


def test_neutral_values_of_unhonoured_fields_pass(server):
    r = httpx.post(server.url + "/v1/completions",
                   json={"prompt": "a", "response_format": {"type": "text"}, "grammar": None,
                         "tool_choice": "none"})
    assert r.status_code == 200, r.text
