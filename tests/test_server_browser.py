"""The chat page at / in a real headless browser (Debian's chromium).

The test drives chromium through the DevTools protocol (a websocket, with
the `websockets` package): it loads the page, types two messages and presses
Send, and waits for each streamed reply. A greedy reply must be the text that
Llama.create_chat_completion gives for the same conversation, so the page's
SSE parsing and its conversation history are both checked; the conversation
must come back after a reload (localStorage), Stop must end a reply, and the
markdown renderer must escape HTML and render code, emphasis and lists. Skipped only
where no chromium is installed (CI installs it: apt-get install chromium).
"""
import contextlib
import itertools
import json
import os
import queue
import random
import re
import shutil
import subprocess
import tempfile
import threading
import time

import pytest

from _server import InProcess, need_server_deps
from _smollm2 import require_model_path

need_server_deps()
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))
                 if p), None)
if CHROMIUM is None:
    pytest.skip("no chromium: apt-get install chromium", allow_module_level=True)
ws_sync = pytest.importorskip("websockets.sync.client")


class Page:
    """One tab of a headless chromium, through the DevTools protocol."""

    def __init__(self, url: str):
        self._dir = tempfile.mkdtemp(prefix="pyllamakv-chromium-")
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-dev-shm-usage", "--remote-debugging-port=0",
             f"--user-data-dir={self._dir}", url],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        lines: queue.Queue = queue.Queue()   # stderr, read in a thread: never block on it
        threading.Thread(target=lambda: [lines.put(ln) for ln in self.proc.stderr],
                         daemon=True).start()
        browser_ws, t_end = None, time.monotonic() + 90
        while browser_ws is None:
            try:
                line = lines.get(timeout=max(0.0, t_end - time.monotonic()))
            except queue.Empty:
                self.close()
                raise RuntimeError("chromium did not open its DevTools port in 90 s") from None
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            browser_ws = m and m.group(1)
        import httpx
        port = re.match(r"ws://[^:]+:(\d+)/", browser_ws).group(1)
        for _ in range(100):
            pages = [t for t in httpx.get(f"http://127.0.0.1:{port}/json/list").json()
                     if t["type"] == "page"]
            if pages:
                break
            time.sleep(0.1)
        self._stack = contextlib.ExitStack()
        self.ws = self._stack.enter_context(
            ws_sync.connect(pages[0]["webSocketDebuggerUrl"], max_size=2**24))
        self._ids = itertools.count(1)

    def call(self, method: str, **params):
        i = next(self._ids)
        self.ws.send(json.dumps({"id": i, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == i:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def js(self, expr: str):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait(self, expr: str, timeout_s: float = 120.0):
        t_end = time.monotonic() + timeout_s
        while time.monotonic() < t_end:
            v = self.js(expr)
            if v:
                return v
            time.sleep(0.05)
        raise TimeoutError(f"{expr} still false after {timeout_s} s")

    def close(self):
        try:
            if hasattr(self, "_stack"):
                self._stack.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            # chromium's helper processes can still write into the profile for a
            # moment after the browser exits: remove it until it stays removed
            for _ in range(50):
                shutil.rmtree(self._dir, ignore_errors=True)
                if not os.path.exists(self._dir):
                    break
                time.sleep(0.2)


@pytest.fixture(scope="module")
def served():
    path = require_model_path()
    from pyllamakv.server import ServerSettings, create_app
    app = create_app(ServerSettings(path, parallel=1, n_ctx=512, n_threads=1))
    server = InProcess(app)
    yield server
    server.stop()
    app.state.pool.close()


def test_chat_page_streams_replies(served):
    from pyllamakv import Llama
    engine = served.app.state.pool.slots[0].engine
    ref = Llama(engine.model_path, n_ctx=512, n_threads=1, _model=engine.model)
    page = Page(served.url + "/")
    try:
        page.wait("document.readyState === 'complete' && !!document.getElementById('send')")
        page.wait("document.getElementById('model').textContent.length > 0", 30)
        assert page.js("document.getElementById('model').textContent") == \
            "SmolLM2-135M-Instruct.Q4_1.gguf"
        page.js("document.getElementById('temp').value = '0';"
                "document.getElementById('max').value = '12'")
        conversation = []
        for i, text in enumerate(["What is the capital of France?", "And of Italy?"]):
            page.js(f"document.getElementById('input').value = {json.dumps(text)};"
                    "document.getElementById('send').click()")
            page.wait("document.body.dataset.state === 'idle' && "
                      f"document.querySelectorAll('.msg.assistant').length === {i + 1} && "
                      "document.getElementById('status').textContent.includes('pieces')")
            reply = page.js(f"document.querySelectorAll('.msg.assistant')[{i}].dataset.raw")
            conversation.append({"role": "user", "content": text})
            want = ref.create_chat_completion(conversation, max_tokens=12, temperature=0)
            assert reply == want["choices"][0]["message"]["content"] and reply
            conversation.append({"role": "assistant", "content": reply})
        status = page.js("document.getElementById('status').textContent")
        assert re.search(r"\d+ pieces in [\d.]+ s \((stop|length)\)", status), status
        assert page.js("document.querySelectorAll('.msg.user').length") == 2
        assert page.js("document.querySelectorAll('.msg.error').length") == 0

        # a reload keeps the conversation
        page.js("window.beforeReload = true; location.reload()")
        page.wait("!window.beforeReload && document.readyState === 'complete' && "
                  "document.querySelectorAll('.msg').length === 4", 30)
        assert page.js("Array.from(document.querySelectorAll('.msg.assistant'))"
                       ".map(d => d.dataset.raw)") == [m["content"] for m in conversation[1::2]]

        # markdown, HTML escaped
        tag = "x" + str(random.randint(0, 10**6))
        html = page.js(f"renderMarkdown('**{tag}** <img src=x onerror=alert(1)> `a<b`\\n\\n"
                       f"- one\\n- two\\n\\n```py\\nprint(1 < 2)\\n```')")
        assert f"<strong>{tag}</strong>" in html and "<img" not in html and "&lt;img" in html
        assert "<code>a&lt;b</code>" in html and "<ul><li>one</li><li>two</li></ul>" in html
        assert '<pre><code class="language-py">print(1 &lt; 2)</code></pre>' in html

        # Stop ends a long reply; New chat empties the page and the store
        page.js("document.getElementById('temp').value = '1';"
                "document.getElementById('max').value = '400'")
        for attempt in range(3):    # a reply may end on its own before Stop: once more
            n = page.js("document.querySelectorAll('.msg.assistant').length")
            page.js("document.getElementById('input').value = 'Write a very long story.';"
                    "document.getElementById('send').click()")
            page.wait(f"(document.querySelectorAll('.msg.assistant')[{n}] || {{dataset: {{}}}})"
                      ".dataset.raw || document.body.dataset.state === 'idle'")
            page.js("document.getElementById('stop').click()")
            page.wait("document.body.dataset.state === 'idle'", 60)
            if page.js("document.getElementById('status').textContent") == "stopped":
                break
        assert page.js("document.getElementById('status').textContent") == "stopped"
        page.js("document.getElementById('new').click()")
        assert page.js("document.querySelectorAll('.msg').length") == 0
        assert page.js("localStorage.getItem('pyllamakv-conversation')") == "[]"
    finally:
        page.close()
        ref.close()
    assert not os.path.exists(page._dir)
