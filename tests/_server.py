"""Servers for the tests, on 127.0.0.1 and a free port: in this process, or a subprocess.

In-process: uvicorn's Server runs the app in a thread over a socket bound
here (port 0, so no race for a port). Subprocess: `python -m pyllamakv.commands.cli
serve`, from the source tree when PYLLAMAKV_LIBRARY points at a built library
(development), else from the installed package (CI).
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def need_server_deps() -> None:
    for name in ("fastapi", "uvicorn", "sse_starlette", "prometheus_client", "httpx"):
        pytest.importorskip(name, reason="the server's extra: pip install 'pyllamakv[test]'")


def openai_client(url: str):
    """The official openai client on a test server: key "unused", no retries, 120 s."""
    import openai
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)


def _bound() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def wait_healthy(url: str, timeout_s: float = 120.0, proc: subprocess.Popen | None = None) -> None:
    import httpx
    t_end = time.monotonic() + timeout_s
    while time.monotonic() < t_end:
        if proc is not None and proc.poll() is not None:
            time.sleep(0.2)          # the reader thread's last lines
            raise RuntimeError(f"the server exited with {proc.returncode}: "
                               f"{getattr(proc, 'log', lambda: '')()}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"no healthy server at {url} within {timeout_s} s")


class InProcess:
    """create_app(settings, pool) served by uvicorn in a thread until stop()."""

    def __init__(self, app):
        import uvicorn
        self.app = app
        self._sock = _bound()
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", access_log=False,
                                timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run,
                                        kwargs={"sockets": [self._sock]}, daemon=True)
        self._thread.start()
        wait_healthy(self.url, 30)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(30)
        self._sock.close()


class Subprocess:
    """`pyllamakv serve ARGS` in a child process until stop()."""

    def __init__(self, *args: str):
        with _bound() as s:
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        dev = bool(os.environ.get("PYLLAMAKV_LIBRARY"))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pyllamakv.commands.cli", "serve", "--port", str(port), *args],
            cwd=ROOT if dev else tempfile.gettempdir(), stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        # stderr read all along (the request log writes a line per request: an unread
        # pipe would fill and stop the server); the text kept for log()
        self._lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.proc.log = self.log
        try:
            wait_healthy(self.url, 120, self.proc)
        except BaseException:
            self.stop()
            raise

    def _read(self) -> None:
        for line in self.proc.stderr:
            self._lines.append(line.decode(errors="replace"))
            if len(self._lines) > 20000:
                del self._lines[:10000]

    def log(self) -> str:
        """What the server wrote to stderr so far (the last 10,000 to 20,000 lines)."""
        return "".join(self._lines)

    @property
    def rss_bytes(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(10)
        if self.proc.stderr:
            self.proc.stderr.close()
