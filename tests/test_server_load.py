"""A bounded load test: 64 concurrent clients x 20 requests against `pyllamakv serve`.

The mix per client: plain and chat completions, streamed or not, some
streams dropped after their first piece, some malformed bodies. Every
well-formed request must be answered with the greedy text its prompt gave
when the server was idle (so none is lost or mixed up with another), every
malformed one with a 400, and the server's RSS must stay flat across the
1280 requests. p50 / p99 latency and tokens per second are printed, not
asserted (run with -s to see them).
"""
import asyncio
import json
import time

import pytest

from _server import Subprocess, need_server_deps
from _smollm2 import require_model_path

need_server_deps()
import httpx  # noqa: E402

CLIENTS, REQUESTS, MAX_TOKENS = 64, 20, 6
PROMPTS = [f"Item {i}: the {w} is" for i, w in enumerate(
    ["sky", "sea", "sun", "moon", "forest", "city", "river", "mountain",
     "desert", "garden", "island", "road", "house", "train", "bird", "book"])]
BAD = [b'{"prompt": "x", "max_tokens": ', b'{"prompt": 3}', b'{"prompt": "x", "top_p": 7}',
       b'{"prompt": "x", "temperature": "warm"}']
RSS_GROWTH_MIB = 48


def body(prompt: str, chat: bool, stream: bool) -> dict:
    b = {"max_tokens": MAX_TOKENS, "temperature": 0, "stream": stream}
    if chat:
        b["messages"] = [{"role": "user", "content": prompt}]
    else:
        b["prompt"] = prompt
    return b


async def ask(c: httpx.AsyncClient, prompt: str, chat: bool, stream: bool,
              drop: bool = False) -> tuple[str | None, int]:
    """(text, completion tokens); text None for a dropped stream."""
    path = "/v1/chat/completions" if chat else "/v1/completions"
    if not stream:
        r = await c.post(path, json=body(prompt, chat, False))
        assert r.status_code == 200, r.text
        j = r.json()
        ch = j["choices"][0]
        return (ch["message"]["content"] if chat else ch["text"]), j["usage"]["completion_tokens"]
    parts, n = [], 0
    async with c.stream("POST", path, json=body(prompt, chat, True)) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                break
            ch = json.loads(line[6:])["choices"][0]
            piece = ch["delta"].get("content") if chat else ch["text"]
            if piece:
                parts.append(piece)
                n += 1
                if drop:
                    return None, n
    return "".join(parts), n


@pytest.fixture(scope="module")
def server():
    s = Subprocess(require_model_path(), "--parallel", "2", "--ctx", "256", "--queue-size", "128",
                   "--threads", "1")
    yield s
    s.stop()


def test_load(server):
    async def main():
        limits = httpx.Limits(max_connections=CLIENTS + 8, max_keepalive_connections=CLIENTS)
        async with httpx.AsyncClient(base_url=server.url, timeout=600, limits=limits) as c:
            want = {}
            for p in PROMPTS:            # the answers of an idle server: the reference
                for chat in (False, True):
                    want[p, chat] = (await ask(c, p, chat, False))[0]
            rss, latencies, tokens, counts = [], [], [0], {"ok": 0, "bad": 0, "dropped": 0}

            async def client(i: int):
                for j in range(REQUESTS):
                    k, prompt = (i * REQUESTS + j), PROMPTS[(i + j) % len(PROMPTS)]
                    t0 = time.perf_counter()
                    if k % 10 == 9:
                        r = await c.post("/v1/completions", content=BAD[k % len(BAD)],
                                         headers={"content-type": "application/json"})
                        assert r.status_code == 400 and r.json()["error"]["message"]
                        counts["bad"] += 1
                        continue
                    chat, stream, drop = k % 2 == 1, k % 3 != 0, k % 10 == 4
                    text, n = await ask(c, prompt, chat, stream, drop)
                    tokens[0] += n
                    if drop:
                        counts["dropped"] += 1
                        continue
                    assert text == want[prompt, chat], (prompt, chat, stream)
                    latencies.append(time.perf_counter() - t0)
                    counts["ok"] += 1

            async def sample_rss(done: asyncio.Event):
                while not done.is_set():
                    rss.append(server.rss_bytes)
                    await asyncio.sleep(0.25)

            done = asyncio.Event()
            sampler = asyncio.create_task(sample_rss(done))
            t0 = time.perf_counter()
            await asyncio.gather(*(client(i) for i in range(CLIENTS)))
            wall = time.perf_counter() - t0
            done.set()
            await sampler
            rss.append(server.rss_bytes)
            h = (await c.get("/health")).json()
            metrics = (await c.get("/metrics")).text
        return rss, latencies, tokens[0], counts, wall, h, metrics

    rss, lat, n_tokens, counts, wall, health, metrics = asyncio.run(main())
    total = CLIENTS * REQUESTS
    assert counts["ok"] + counts["bad"] + counts["dropped"] == total
    assert counts["bad"] == total // 10 and counts["dropped"] > 0
    assert health["slots_busy"] == 0 and health["queue_length"] == 0
    assert 'status="503"' not in metrics
    lat.sort()
    warm = rss[len(rss) // 4]                   # after the first quarter: allocators settled
    growth = (max(rss[len(rss) // 4:]) - warm) / 2**20
    print(f"\nload: {total} requests ({counts['ok']} answered in full, {counts['dropped']} "
          f"dropped mid-stream, {counts['bad']} malformed) in {wall:.1f} s; latency p50 "
          f"{lat[len(lat) // 2] * 1e3:.0f} ms, p99 {lat[int(len(lat) * 0.99)] * 1e3:.0f} ms; "
          f"{n_tokens / wall:.1f} tokens/s; server RSS {warm / 2**20:.0f} MiB after warm-up, "
          f"+{growth:.1f} MiB at most, {rss[-1] / 2**20:.0f} MiB at the end")
    assert growth < RSS_GROWTH_MIB
