"""The core's memory plan: what a model and a context would take, asked of the core.

``memory_plan(tensors, hparams, device, n_cpu_moe, **context_args)`` calls ``lkv_memory_plan_compute``
(llamakv.h): the core binds the file's tensors without copying them and runs
the context's creation on a backend that writes each allocation down instead
of making it, so the figures are the core's own (workspace and phase arena,
logits, recurrent state, KV pool or resident planes, MTP block, the CUDA
backend's buffers and the GEMM scratch its kernel chooser needs), on the
device named, whether or not that device is present, with the routed experts
of the first n_cpu_moe layers in host memory (not counted in the weights).
Nothing is allocated
and no weight is read. Refusals (a pool below the plan's minimum, an
impossible parameter) are the context's own exceptions.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from .ffi import ffi, lib
from .native import context_params, model_params_of
from .status import check as _check


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """lkv_memory_plan's fields (llamakv.h says what each holds), in bytes."""
    device: int
    n_ubatch: int
    phase_arena: int
    n_allocations: int
    weights: int
    weights_device: int
    backend: int
    workspace: int
    workspace_decode: int
    logits: int
    logits_wide: int
    recurrent: int
    kv: int
    kv_pool: int
    kv_ring: int
    mtp: int
    host: int
    device_total: int
    kv_device: int
    recurrent_device: int


def memory_plan(tensors, hparams: dict, device: str = "cpu", *, n_cpu_moe: int = 0,
                **context_args) -> MemoryPlan:
    """The core's plan for the model of a GGUF's tensors (GGUFFile.tensors) and
    hyper-parameters (gguf.hparams.model_params) on device, the experts of its
    first n_cpu_moe layers in host memory, and a context made with context_args
    (Context's keyword arguments)."""
    mp, descs, keep = model_params_of(tensors, hparams, device)
    mp.n_cpu_moe = n_cpu_moe
    cp = context_params(**context_args)
    out = ffi.new("lkv_memory_plan *")
    _check(lib.lkv_memory_plan_compute(mp, descs, len(tensors), cp, out), "memory plan")
    del keep
    return MemoryPlan(**{f.name: int(getattr(out, f.name)) for f in fields(MemoryPlan)})
