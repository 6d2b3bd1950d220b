"""Opening a model's context: from the load-time settings (config.LlamaConfig) and
a GGUF to an Engine that owns the context, each decision in the order the next
one needs it:

  device    config.choose_device (device, n_gpu_layers); a loaded model's own
  budget    under gpu_memory_mib, memory/budget.plan_budget: every part's share,
            checked before the weights load; for a MoE model with n_cpu_moe
            unset, the layers whose routed experts stay in host memory
  model     core/native.Model, loaded once here; a Model given is shared (the
            server's contexts, a Llama over a server's model)
  pool      memory/sizes.pool_and_ubatch: the KV pool (kv_pool_mib, or the
            budget's), planned for n_seq_max sequences and given once, and
            n_ubatch where the settings leave it unset
  context   Engine.start: one context of n_seq_max sequences

``Llama`` builds its engine here and generates on a sequence of it; the server
builds its one shared engine here (or, where server/engines.sharing gives a
reason, one per slot over the same Model). The settings' n_cpu_moe becomes
the one the model has (a loaded model's, or the budget's choice).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

from ..config import LlamaConfig, choose_device
from ..core.native import GGUFFile, Model, cuda_device_count, model_params
from ..errors import ParameterError
from ..memory.budget import plan_budget
from ..memory.sizes import pool_and_ubatch
from .engine import Engine


@dataclass(slots=True)
class ContextPlan:
    """What opening a context decided (Llama's and the server's reports)."""
    device: str                 # "cpu" | "cuda"
    n_ctx: int                  # tokens of each sequence (the settings' 0: the model's)
    n_cpu_moe: int              # layers whose experts run from host memory (cpu_moe_layers)
    memory: Any                 # budget.BudgetSplit under gpu_memory_mib, else None
    kv_pool_bytes: int | None   # the context's pool, every sequence's (None: all resident)
    n_ubatch: int               # the micro-batch the context is made with


def gguf_device(file: GGUFFile, cfg: LlamaConfig) -> tuple[dict, str]:
    """(the file's hparams, the device that runs it under cfg)."""
    hp = model_params(file)
    return hp, choose_device(cfg, hp["n_layer"], cuda_device_count())


def load_model(file: GGUFFile, device: str, n_threads: int | None = None,
               n_cpu_moe: int | None = None) -> Model:
    """The weights of file on device (the first n_cpu_moe layers' experts in host
    memory); the model owns the file."""
    return Model(file, device, n_threads, n_cpu_moe, own_file=True)


def open_engine(source: "str | os.PathLike | GGUFFile | Model", cfg: LlamaConfig, *,
                embeddings: bool = False, wide_logits: bool = False, mtp: bool = False,
                shared: bool = False, engine: Engine | None = None,
                progress: Callable[..., Any] | None = None) -> Engine:
    """An Engine of cfg.n_seq_max sequences whose context is made from cfg (see
    the module); ``engine.plan`` says what was chosen, ``engine.model`` is the model.

    source: a GGUF path or an open GGUFFile (loaded here; the engine closes the
    model with its context) or a loaded Model (shared; its owner closes it).
    embeddings: the context computes embeddings; wide_logits: a drafter's
    verification rows are counted in a budget; mtp: the model's MTP block runs,
    where it has one. shared: the sequences are a server's slots (engine.py).
    engine: an Engine to make the context of instead of a new one (one that has
    its context already is returned as it is). progress: progress.py's callback ("load" 1
    after the file opens, 2 after the model loads)."""
    progress = progress or (lambda *a: None)
    if not isinstance(cfg, LlamaConfig):
        raise ParameterError(f"cfg must be a LlamaConfig, not {type(cfg).__name__}")
    if engine is not None and engine.n_seq != cfg.n_seq_max:
        raise ParameterError(f"an engine of {engine.n_seq} sequences needs n_seq_max="
                             f"{engine.n_seq} (its pool is planned for all of them), "
                             f"got {cfg.n_seq_max}")
    if engine is not None and engine.ctx is not None:
        if engine.plan is None:
            raise ParameterError("the engine's context was made by Engine.open from "
                                 "Context's arguments, without a plan: give a fresh Engine")
        return engine
    model = source if isinstance(source, Model) else None
    if model is None:
        file = source if isinstance(source, GGUFFile) else GGUFFile(source)
        if file is not source:
            progress("load", 1, 4)
        hp, device = gguf_device(file, cfg)
    else:   # a loaded model's device and experts stay as they are
        file, hp, device = model.file, model.hparams, model.device
        cfg.n_cpu_moe = model.n_cpu_moe
    n_ctx = cfg.n_ctx or hp["n_ctx_train"] or 4096
    mtp = bool(mtp) and hp.get("n_nextn", 0) > 0
    budget = None if cfg.gpu_memory_mib is None else plan_budget(
        cfg, hp, file.tensors, n_ctx, device, embeddings=embeddings,
        wide_logits=wide_logits, mtp=mtp)
    memory = None if budget is None else budget[0]
    if memory is not None and memory.n_cpu_moe is not None:
        cfg.n_cpu_moe = memory.n_cpu_moe
    owns_model = model is None
    if owns_model:
        model = load_model(file, device, cfg.n_threads, cfg.n_cpu_moe)
    progress("load", 2, 4)
    try:
        pool, n_ubatch = pool_and_ubatch(cfg, hp, n_ctx, device, cfg.n_batch, cfg.type_k,
                                         cfg.type_v, budget, file.tensors)
        plan = ContextPlan(device, n_ctx, cfg.cpu_moe_layers(hp, device), memory, pool,
                           min(n_ubatch, cfg.n_batch))
        engine = engine or Engine(cfg.n_seq_max, shared)
        engine.start(model, plan, owns_model, n_ctx=n_ctx, n_batch=cfg.n_batch,
                     n_ubatch=plan.n_ubatch, n_threads=cfg.n_threads, type_k=cfg.type_k,
                     type_v=cfg.type_v, logits_all=cfg.logits_all or embeddings,
                     kv_pool_bytes=pool, gpu_kernels=cfg.gpu_kernels, embeddings=embeddings,
                     mtp=mtp)
    except BaseException:
        if owns_model:
            model.close()
        raise
    return engine
