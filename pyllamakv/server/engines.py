"""The slots' engines, loaded from the server's settings: a SlotEngine per slot
(slot_engine.py), each a sequence of one shared engine (engine/engine.py: one
context, one KV pool given once, one scheduler whose steps batch the slots'
work), embedding servers and CPU hybrids included, with the chat template and
the budget they share (slots.py runs them). The engine is opened over the
loaded model by engine/open.py (its pool, threads and budget planned as a
Llama's are); no Llama is made. Two kinds of model keep a context per slot,
each with an even share of the pool: hybrids on a GPU (several of their
sequences in one context the core takes on the CPU only until verified on a
GPU: native/src/context.c) and models with an MTP block (a slot's block drafts
while its sequence steps alone); ``memory_layout`` says which (/props, the
startup line).
"""
from __future__ import annotations

from typing import Any

from ..api.embedding import pooling_type
from ..core.native import GGUFFile
from ..config import LlamaConfig
from ..default_model import default_model_path
from ..engine.open import gguf_device, load_model, open_engine
from .settings import ServerSettings
from .slot_engine import Shared, SlotEngine
from ..spec.drafters import make_drafter
from ..text.chat import ChatFormatter
from ..text.chat_formats import CHAT_FORMATS
from ..text.chat_handlers import llama_chat_formatter
from ..text.llama_tokenizer import llama_tokenizers
from .speculation import DRAFT, LOOKUP, MTP, SpecRequest, check_available


def slot_budget_mib(budget_mib: float, tensors, parallel: int, n_cpu_moe: int = 0,
                    n_layer: int = 0) -> float:
    """Each slot's gpu_memory_mib: the weights on the device (loaded once, counted by
    every slot; a MoE model's first n_cpu_moe of n_layer layers keep their experts in
    host memory) and an equal share of what they leave of the server's budget."""
    from ..gguf.arch_moe import host_expert
    from ..memory.budget import MIB, weight_device_bytes
    from ..errors import MemoryBudgetError
    w = weight_device_bytes([t for t in tensors
                             if not host_expert(t.name, n_cpu_moe, n_layer)]) / MIB
    if w > budget_mib:
        raise MemoryBudgetError(f"--gpu-memory-mib: the weights alone take {w:.1f} MiB of "
                                f"device memory, more than the budget of {budget_mib:.1f} MiB")
    return w + (budget_mib - w) / parallel


def sharing(device: str, hparams: dict, n_nextn: int, parallel: int) -> str | None:
    """None where the slots can be sequences of one shared engine (one context, one
    pool given once, batched steps); else why each slot keeps a context of its own."""
    if parallel == 1:
        return None
    if n_nextn > 0:
        return ("a slot's MTP block drafts only while its sequence steps alone, and the "
                "slots of a shared context step together (tests/test_server_mtp.py)")
    if device != "cpu" and hparams.get("full_attn_interval"):
        return (f"several sequences of a hybrid model in one context are not yet verified "
                f"on the {device} backend (native/src/context.c)")
    return None


def server_cpu_moe(s: ServerSettings, tensors, hp: dict, device: str, apart: str | None) -> int:
    """--gpu-memory-mib with --n-cpu-moe unset, for a MoE model: the fewest layers whose
    routed experts stay in host memory such that the slots fit, planned as their
    slots' contexts plan them (budget.plan_budget: one engine of every slot with the whole
    budget, or, apart, each slot's share beside the weights loaded once; a drafter's
    logits rows, the MTP block where the model has one)."""
    from ..memory.budget import fewest_host_layers, plan_budget

    def at(n: int):
        if apart is None:
            kw = dict(kv_pool_mib=s.kv_pool_mib, gpu_memory_mib=s.gpu_memory_mib,
                      n_seq_max=s.parallel)
        else:
            kw = dict(kv_pool_mib=s.slot_pool_mib, gpu_memory_mib=slot_budget_mib(
                s.gpu_memory_mib, tensors, s.parallel, n, hp["n_layer"]))
        cfg = LlamaConfig(s.n_ctx, device=s.device, type_k=s.type_k, type_v=s.type_v,
                          n_cpu_moe=n, **kw)
        return plan_budget(cfg, hp, tensors, s.n_ctx, device, embeddings=s.embedding,
                           wide_logits=not s.embedding,
                           mtp=not s.embedding and hp.get("n_nextn", 0) > 0)
    return fewest_host_layers(at, hp["n_layer"], f"--gpu-memory-mib: the budget of "
                              f"{s.gpu_memory_mib:.1f} MiB does not hold this model with "
                              f"{s.parallel} slots of n_ctx={s.n_ctx}")[0]


def load_engines(s: ServerSettings) -> list[SlotEngine]:
    """s.parallel SlotEngines over one Model: the weights are loaded once. Where the
    slots share one engine (sharing), the pool, the threads and the memory budget
    are the server's, given once to that engine; else each slot's context gets an
    even share of them (settings.py). The engines are opened as a Llama's are
    (engine/open.py)."""
    path = s.model or default_model_path()
    file = GGUFFile(path)
    hp, device = gguf_device(file, LlamaConfig(s.n_ctx, device=s.device, type_k=s.type_k,
                                               type_v=s.type_v, n_gpu_layers=s.n_gpu_layers))
    # an embedding server runs no MTP block
    apart = sharing(device, hp, 0 if s.embedding else hp.get("n_nextn", 0), s.parallel)
    n_cpu_moe = s.n_cpu_moe    # unset with a budget: chosen as the slots' contexts plan it
    if n_cpu_moe is None and s.gpu_memory_mib is not None and hp.get("n_expert"):
        n_cpu_moe = server_cpu_moe(s, file.tensors, hp, device, apart)
    model = load_model(file, device, s.threads_per_slot, n_cpu_moe)
    try:
        return _slots(s, path, model, apart)
    except BaseException:
        model.close()
        raise


def _slots(s: ServerSettings, path: str, model, apart: str | None) -> list[SlotEngine]:
    kw: dict[str, Any] = dict(device=s.device, type_k=s.type_k, type_v=s.type_v,
                              n_gpu_layers=s.n_gpu_layers, n_cpu_moe=model.n_cpu_moe)
    if apart is None:          # one context for all slots: its pool and threads, given once
        kw.update(n_threads=s.engine_threads, kv_pool_mib=s.kv_pool_mib,
                  gpu_memory_mib=s.gpu_memory_mib, n_seq_max=s.parallel)
    else:                      # a context per slot: each an even share
        kw.update(n_threads=s.threads_per_slot, kv_pool_mib=s.slot_pool_mib,
                  gpu_memory_mib=None if s.gpu_memory_mib is None else
                  slot_budget_mib(s.gpu_memory_mib, model.file.tensors, s.parallel,
                                  model.n_cpu_moe, model.hparams["n_layer"]))
    # a budget counts the logits rows a verification needs (budget.py): any request may
    # ask for speculation; a model with an MTP block gets contexts that run it
    # (speculative.type "mtp"); an embedding server neither
    uses = dict(embeddings=s.embedding, wide_logits=not s.embedding,
                mtp=not s.embedding and model.n_nextn > 0)
    engines = []
    try:
        for _ in range(1 if apart is None else s.parallel):
            engines.append(open_engine(model, LlamaConfig(s.n_ctx, **kw),
                                       shared=apart is None and s.parallel > 1, **uses))
    except BaseException:
        for e in engines:
            e.close()
        raise
    shared = _shared(s, path, model, engines[0], apart)
    seqs = ([(engines[0], engines[0].open(keep_all=False)) for _ in range(s.parallel)]
            if apart is None else [(e, e.open(keep_all=False)) for e in engines])
    slots = [SlotEngine(seq, shared, e) for e, seq in seqs]
    if not s.embedding:
        for e in slots:
            _speculation(s, e)
    return slots


def _shared(s: ServerSettings, path: str, model, engine, apart: str | None) -> Shared:
    """The model's parts every slot uses: its text parts as a Llama's (the tokenizer,
    the chat template, or --chat-template's), sizes, device and memory plan."""
    metadata = model.file.metadata
    tokenizer = llama_tokenizers(metadata, {})[0]
    template = llama_chat_formatter(None, metadata, tokenizer)[0]
    if s.chat_template is not None:      # --chat-template: a named format or jinja source
        source, name = chat_template_source(s.chat_template)
        template = ChatFormatter.from_metadata({"tokenizer.chat_template": source},
                                               tokenizer, source=name)
    pooling = pooling_type(_pooling(s, model), metadata) if s.embedding else 0
    return Shared(path, model.file.string_metadata, tokenizer, template, engine.plan.n_ctx,
                  model.n_vocab, model.device, engine.plan.memory, pooling, apart)


def _speculation(s: ServerSettings, e: SlotEngine) -> None:
    """The slot's drafters: its context's MTP block where the model has one, a draft
    GGUF of its own (--draft), and the server's default kind (speculation.py)."""
    has_mtp = e.model.n_nextn > 0
    gguf = s.draft_model not in (None, "lookup", "mtp")
    e.spec_mtp = make_drafter("mtp", e.sequence) if has_mtp else None
    e.spec_draft_model = make_drafter(s.draft_model, e.sequence) if gguf else None
    e.spec_default = {None: None, "lookup": LOOKUP, "mtp": MTP}.get(s.draft_model, DRAFT)
    if has_mtp:               # on only for requests that draft with it (api/decoding.py)
        e.sequence.ctx.set_mtp(False)
    check_available(SpecRequest(), e)     # --draft mtp on a model without the block


def _pooling(s: ServerSettings, model) -> str:
    """An embedding server's pooling: mean where neither --pooling nor the model names
    one (OpenAI's answer is one vector)."""
    if s.pooling is not None:
        return s.pooling
    arch = model.file.metadata.get("general.architecture", "")
    return model.file.metadata.get(f"{arch}.pooling_type", "mean") or "mean"


def memory_layout(engines: list) -> dict:
    """How the slots hold their KV cache (/props, the startup line): how many
    contexts, whether the slots share one, the pool of each (None: all resident)
    and the whole, and why the slots do not share where they do not."""
    ctxs = {id(getattr(getattr(e, "engine", None), "ctx", None) or e): e for e in engines}
    pools = [getattr(e, "kv_pool_bytes", None) for e in ctxs.values()]
    mib = None if any(p is None for p in pools) else round(sum(pools) / (1 << 20), 3)
    return {"contexts": len(ctxs), "shared": len(ctxs) == 1 and len(engines) > 1,
            "kv_pool_mib": mib,
            "context_kv_pool_mib": None if mib is None else round(mib / len(ctxs), 3),
            "not_shared_because": getattr(engines[0], "apart", None)}


def chat_template_source(value: str) -> tuple[str, str]:
    """(jinja source, its name in errors) of --chat-template: a named format or a template."""
    if value in CHAT_FORMATS:
        return CHAT_FORMATS[value][0], f"--chat-template {value}"
    if "{%" not in value and "{{" not in value:
        raise ValueError(f"--chat-template {value!r} is neither a known format "
                         f"({', '.join(sorted(CHAT_FORMATS))}) nor a jinja template")
    return value, "--chat-template"


def kv_line(layout: dict) -> str:
    """memory_layout in words (the startup line)."""
    pool = layout["kv_pool_mib"]
    pool = ("KV cache all resident" if pool is None
            else f"KV pool {layout['context_kv_pool_mib']:g} MiB")
    if layout["shared"]:
        return f"one context shared by the slots, {pool}"
    if layout["contexts"] == 1:
        return f"one context, {pool}"
    return f"a context per slot, each {pool}: {layout['not_shared_because']}"
