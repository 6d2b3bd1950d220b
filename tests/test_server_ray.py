"""examples/ray_serve.py on this machine: two replicas behind Ray Serve's proxy.

Skipped unless ray[serve] is installed (CI installs it). The example runs as a
subprocess started from the repository root, as the README runs it (Ray puts
that directory on its workers' path; the replicas must still import the
installed package, or the source tree with PYLLAMAKV_LIBRARY in development),
and stops its own Ray instance on SIGINT; the test checks that both
replicas answer (their /health reports two process ids) and that a greedy
completion through the balancer is the library's own.
"""
import os
import signal
import subprocess
import sys
import time

import pytest

from _server import ROOT, _bound, need_server_deps, wait_healthy
from _smollm2 import require_model_path

need_server_deps()
pytest.importorskip("ray.serve", reason="ray[serve] is not installed")
import httpx  # noqa: E402


def test_two_replicas_behind_ray_serve():
    path = require_model_path()
    with _bound() as s:
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    if env.get("PYLLAMAKV_LIBRARY"):         # development: the replicas import the source tree
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "examples", "ray_serve.py"),
                             path, "--replicas", "2", "--port", str(port), "--ctx", "256"],
                            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_healthy(url, 240, proc)
        pids, t_end = set(), time.monotonic() + 120
        while len(pids) < 2 and time.monotonic() < t_end:   # until both replicas are up
            r = httpx.get(url + "/health", timeout=30)
            if r.status_code == 200:
                pids.add(r.json()["pid"])
        assert len(pids) == 2
        from pyllamakv import Llama
        with Llama(path, n_ctx=256, n_threads=1) as ref:
            want = ref("The capital of France is", max_tokens=6, temperature=0)
        for _ in range(4):
            r = httpx.post(url + "/v1/completions", timeout=120,
                           json={"prompt": "The capital of France is", "max_tokens": 6,
                                 "temperature": 0})
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["text"] == want["choices"][0]["text"]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr.close()
