"""`pyllamakv serve`'s command line: -m names the model as MODEL does, and a
port that cannot be bound is a one-line error before the model loads and
before anything says "listening"."""
from __future__ import annotations

import random
import socket

import pytest
from click.testing import CliRunner

from _server import Subprocess, need_server_deps

need_server_deps()
import httpx  # noqa: E402


def run(*args):
    from pyllamakv.commands.cli import main
    return CliRunner().invoke(main, list(args))


def test_a_port_in_use_is_an_error_before_listening(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        # a model that does not exist: the port is checked first, so this is not reached
        missing = tmp_path / f"absent-{random.getrandbits(32):08x}.gguf"
        r = run("serve", "-m", str(missing), "--port", str(port))
    assert r.exit_code == 1, r.output
    assert f"cannot listen on 127.0.0.1:{port}" in r.stderr
    assert "listening" not in r.output and "Traceback" not in r.output
    assert "not found" not in r.output


def test_an_address_not_of_this_machine_is_an_error():
    r = run("serve", "--host", "192.0.2.1", "--port", "0")          # TEST-NET-1
    assert r.exit_code == 1 and "cannot listen on 192.0.2.1:0" in r.stderr, r.output


def test_dash_m_reaches_the_settings(tmp_path):
    missing = tmp_path / f"absent-{random.getrandbits(32):08x}.gguf"
    r = run("serve", "-m", str(missing), "--port", "0")
    assert r.exit_code == 1 and "model file not found" in r.stderr and missing.name in r.stderr
    r = run("serve", str(missing), "-m", str(tmp_path / "other.gguf"))
    assert r.exit_code == 2 and "give the model once" in r.output


def test_serve_dash_m_serves_that_model(path):
    alias = f"m{random.getrandbits(32):08x}"
    server = Subprocess("-m", path, "--ctx", "128", "--alias", alias)
    try:
        models = httpx.get(server.url + "/v1/models", timeout=30).json()
        assert [m["id"] for m in models["data"]] == [alias]
        r = httpx.post(server.url + "/v1/completions", timeout=120,
                       json={"prompt": "The capital of France is", "max_tokens": 2,
                             "temperature": 0})
        assert r.status_code == 200 and r.json()["choices"][0]["text"].startswith(" Paris")
    finally:
        server.stop()
