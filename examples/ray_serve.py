"""Replicas of the pyllamakv server behind Ray Serve's load balancer.

Each replica is a whole `pyllamakv serve` app (its own copy of the model and
its --parallel slots) in a Ray actor; Ray Serve's HTTP proxy spreads the
requests over the replicas and keeps at most parallel + queue_size requests
on each. On one machine that buys nothing over `pyllamakv serve --parallel`
(one model in memory, one process); it pays off on a Ray cluster, where the
replicas land on several machines (or GPUs) behind one address.

    pip install 'pyllamakv[server]' 'ray[serve]'
    python examples/ray_serve.py --replicas 2 --port 8000
    curl localhost:8000/v1/completions -d '{"prompt": "Hello", "max_tokens": 16}'

Ctrl-C (SIGINT) or SIGTERM stops Serve and the local Ray instance it started.

Ray puts the directory it is started from on its workers' import path; run
from a clone of the repository, that would make the replicas import the
clone's uncompiled `pyllamakv/` instead of the installed package. The job's
working directory is therefore an empty folder of its own (runtime_env
working_dir), and the replicas import what the driver imports.
"""
from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading

import ray
from ray import serve

from pyllamakv.server import ServerSettings


def app_for(settings: ServerSettings, replicas: int, cpus_per_replica: float):
    """A Serve application: `replicas` copies of the server's FastAPI app."""
    def build():                 # runs in each replica: loads the model there
        from pyllamakv.server import create_app
        return create_app(settings)

    deployment = serve.deployment(
        serve.ingress(build)(), name="pyllamakv", num_replicas=replicas,
        max_ongoing_requests=settings.parallel + settings.queue_size,
        ray_actor_options={"num_cpus": cpus_per_replica})
    return deployment.bind()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", default=None, help="GGUF file (default: the default model)")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--parallel", type=int, default=1, help="slots per replica")
    ap.add_argument("--ctx", type=int, default=2048, help="context of each slot")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads per slot")
    ap.add_argument("--api-key", default=None)
    a = ap.parse_args(argv)
    settings = ServerSettings(a.model, parallel=a.parallel, n_ctx=a.ctx, n_threads=a.threads,
                              api_key=a.api_key)
    with tempfile.TemporaryDirectory(prefix="pyllamakv-ray-") as empty:
        run(a, settings, empty)


def run(a: argparse.Namespace, settings: ServerSettings, working_dir: str) -> None:
    ray.init(include_dashboard=False, log_to_driver=False,
             runtime_env={"working_dir": working_dir})
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        serve.start(http_options={"host": a.host, "port": a.port})
        serve.run(app_for(settings, a.replicas, float(a.parallel * a.threads)),
                  name="pyllamakv", route_prefix="/")
        print(f"pyllamakv: {a.replicas} replicas on http://{a.host}:{a.port}", file=sys.stderr,
              flush=True)
        stop.wait()
    finally:
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()
