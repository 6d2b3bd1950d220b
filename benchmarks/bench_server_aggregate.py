"""Aggregate decode through the server against the engine's, B sequences at once.

    python benchmarks/bench_server_aggregate.py -b 3 -n 64 --rounds 3

Engine: one Llama(n_seq_max=B) completing a list of B prompts (one thread; its
scheduler puts the B sequences' prompts and tokens into shared steps). Server:
`pyllamakv serve`'s app in this process (uvicorn on a thread, --parallel B: the
slots are sequences of one shared engine), B concurrent /v1/completions
requests of the same prompts. Both greedy (the same tokens), both with the
context's threads set to --threads. The figure is completion tokens / wall
seconds of the whole request set (prompts included: they are short); rounds
alternate engine and server so that a busy machine slows both alike. The last
line is the figure: server/engine, the medians' ratio and each round's, and
whether it is within the target (0.90..1.10).
"""
from __future__ import annotations

import argparse
import socket
import statistics
import threading
import time

import httpx

PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):",
           "The three primary colors are", "Water boils at", "My favourite fruit is",
           "In 1969, humans", "The quick brown fox"]


class Served:
    """The app on uvicorn in a thread, on a free local port."""

    def __init__(self, app) -> None:
        import uvicorn
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning",
                                                     access_log=False))
        threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                         daemon=True).start()
        for _ in range(600):
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError("the server did not come up")

    def stop(self) -> None:
        self._server.should_exit = True


def engine_round(llm, prompts, n) -> tuple[int, float]:
    t0 = time.perf_counter()
    out = llm.create_completion(prompts, max_tokens=n, temperature=0)
    return out["usage"]["completion_tokens"], time.perf_counter() - t0


def server_round(url, prompts, n) -> tuple[int, float]:
    counts = [0] * len(prompts)
    barrier = threading.Barrier(len(prompts) + 1)

    def run(i):
        barrier.wait()
        r = httpx.post(f"{url}/v1/completions", timeout=600, json={
            "prompt": prompts[i], "max_tokens": n, "temperature": 0})
        counts[i] = r.json()["usage"]["completion_tokens"]
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return sum(counts), time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-b", type=int, default=3, help="sequences (slots) at once")
    ap.add_argument("-n", type=int, default=64, help="tokens per sequence")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="the context's threads")
    ap.add_argument("--n-ctx", type=int, default=512)
    ap.add_argument("--model", default=None)
    a = ap.parse_args()
    from pyllamakv import Llama
    from pyllamakv.default_model import default_model_path
    from pyllamakv.server import ServerSettings, create_app
    from pyllamakv.server.engines import kv_line, load_engines, memory_layout
    from pyllamakv.server.slots import SlotPool
    path = a.model or default_model_path()
    prompts = (PROMPTS * (a.b // len(PROMPTS) + 1))[:a.b]
    llm = Llama(path, n_seq_max=a.b, n_ctx=a.n_ctx, n_threads=a.threads)
    per_slot = max(1, a.threads // a.b)   # the shared engine's context gets per_slot * b, capped
    settings = ServerSettings(path, parallel=a.b, n_ctx=a.n_ctx, n_threads=per_slot,
                              queue_size=a.b)
    pool = SlotPool(load_engines(settings), settings.queue_size)
    layout = kv_line(memory_layout([x.engine for x in pool.slots]))
    server = Served(create_app(settings, pool))
    sched = pool.slots[0].engine.engine.scheduler
    esched = llm.engine.scheduler
    eng, srv = [], []
    try:
        engine_round(llm, prompts, 4)             # warm both
        server_round(server.url, prompts, 4)
        for r in range(a.rounds):
            for name, fn, out in (("engine", lambda: engine_round(llm, prompts, a.n), eng),
                                  ("server", lambda: server_round(server.url, prompts, a.n), srv)):
                sc = sched if name == "server" else esched
                s0, m0 = sc.steps, sc.multi_steps
                tokens, secs = fn()
                out.append(tokens / secs)
                extra = f", steps {sc.steps - s0} ({sc.multi_steps - m0} of several sequences)"
                print(f"round {r} {name}: {tokens} tokens in {secs:.2f} s = "
                      f"{tokens / secs:.1f} tok/s{extra}", flush=True)
    finally:
        server.stop()
        pool.close()
        llm.close()
    e, s = statistics.median(eng), statistics.median(srv)
    ratios = [sv / en for en, sv in zip(eng, srv)]    # each round's pair ran back to back
    ratio = s / e
    print(f"B={a.b} n={a.n} threads: engine {a.threads}, server {settings.engine_threads} "
          f"({layout}): engine {e:.1f} tok/s, server {s:.1f} tok/s (medians of {a.rounds})")
    print(f"server/engine aggregate decode ratio: {ratio:.3f} (per round: "
          f"{', '.join(f'{r:.3f}' for r in ratios)}); target 0.90..1.10: "
          f"{'within' if 0.9 <= ratio <= 1.1 else 'OUTSIDE'}")


if __name__ == "__main__":
    main()
