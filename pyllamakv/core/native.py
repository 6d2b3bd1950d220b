"""Model and Context: the owners of the core's handles.

``Model`` turns a GGUF file into the core's model description (hyper-parameters
and one pointer per tensor into the file's memory map); ``Context`` decodes
tokens and exposes logits as numpy arrays. Failures of the core become
exceptions carrying the core's message. Handles are released by ``close()``
(idempotent), by ``with``, and by the garbage collector as a last resort.

Threads: each object's calls are serialised by its Guard; ``close()`` waits
for a call in progress, and calls after it raise ClosedError. A Context holds
its Model; ``Model.close()`` closes the model's contexts first (each waiting
for its own decode), so no memory in use is freed. A decode of more than one
token is abortable (see guard.abortable): Ctrl-C stops it between layers and
the cache stays as it was before the call.
"""
from __future__ import annotations

import os
import weakref
from typing import Any, Sequence

import numpy as np

from .ffi import ffi, lib
from .status import check as _check, int32 as _int32
from ..errors import ClosedError, ParameterError, ParameterTypeError
from ..gguf.reader import GGUFError, GGUFFile  # noqa: F401  (GGUFError re-exported)
from ..checks import check_gpu_kernels
from ..engine.guard import Guard, abortable
from .native_gen import GenerateMixin
from .native_mtp import MTPMixin
from .native_seqs import SequencesMixin
from ..gguf.hparams import ARCHS, model_params  # noqa: F401  (re-exported)
from ..gguf.weight_check import check_finite

DEVICE_CPU, DEVICE_CUDA = 0, 1


# ---------------------------------------------------------------- element types

def _type_table() -> dict[str, int]:
    table: dict[str, int] = {}
    info = ffi.new("lkv_type_info *")
    for tid in range(64):
        if lib.lkv_type_info_get(tid, info) == 0:
            table[ffi.string(info.name).decode().lower()] = tid
    return table


TYPE_IDS: dict[str, int] = _type_table()
TYPE_NAMES: dict[int, str] = {v: k for k, v in TYPE_IDS.items()}


def type_id(t: str | int, *, kv: bool = False) -> int:
    """A ggml type id from a name ("q8_0", "F16") or a number; checked."""
    if isinstance(t, (bool, float)) or not isinstance(t, (str, int, np.integer)):
        raise TypeError(f"type must be a name like 'f16' or a ggml type number, not {t!r}")
    tid = TYPE_IDS.get(t.lower()) if isinstance(t, str) else int(t)
    if tid is not None and not 0 <= tid < 2**31:    # the core's int32 (2**40: OverflowError)
        tid = None
    info = ffi.new("lkv_type_info *")
    if tid is None or lib.lkv_type_info_get(tid, info) != 0:
        raise ValueError(f"unknown element type {t!r}; known: {', '.join(sorted(TYPE_IDS))}")
    if kv and not info.is_kv_type:
        kv_names = [n for n, i in TYPE_IDS.items() if _is_kv(i)]
        raise ValueError(f"{TYPE_NAMES[tid]} is not a supported KV cache type; use one of "
                         f"{', '.join(kv_names)}")
    return tid


def _is_kv(tid: int) -> bool:
    info = ffi.new("lkv_type_info *")
    return lib.lkv_type_info_get(tid, info) == 0 and bool(info.is_kv_type)


def _is_weight(tid: int) -> bool:
    info = ffi.new("lkv_type_info *")
    return lib.lkv_type_info_get(tid, info) == 0 and bool(info.is_weight_type)


WEIGHT_TYPES = frozenset(t for t in TYPE_NAMES if _is_weight(t))


def row_bytes(t: str | int, n: int) -> int:
    return int(lib.lkv_row_bytes(type_id(t), n))


def cuda_device_count() -> int:
    return int(lib.lkv_cuda_device_count())


# ---------------------------------------------------------------- model

def model_params_of(tensors, hparams: dict, device: str, n_threads: int | None = None):
    """(lkv_model_params *, lkv_tensor_desc[], what must stay alive while the core
    reads them) for a GGUF's tensors (GGUFFile.tensors) on device."""
    p = ffi.new("lkv_model_params *")
    lib.lkv_model_params_init(p)
    for name, value in hparams.items():
        setattr(p, name, value)
    p.device = {"cpu": DEVICE_CPU, "cuda": DEVICE_CUDA}[device]
    p.n_threads = _int32("n_threads", n_threads or 0)
    ts = tensors
    descs = ffi.new("lkv_tensor_desc[]", max(len(ts), 1))
    keep = []
    for d, t in zip(descs, ts):
        name = ffi.new("char[]", t.name.encode())
        keep.append(name)
        d.name = name
        d.type = t.type
        d.n_dims = len(t.shape)
        for i, n in enumerate(t.shape[:4]):
            d.ne[i] = n
        if not t.nbytes:
            d.data = ffi.NULL
        elif hasattr(t, "data"):
            d.data = ffi.from_buffer(t.data)
        else:   # described, not loaded (a memory plan's question: the core reads no data)
            d.data = ffi.cast("void *", 4096 + int(t.offset))
        d.nbytes = t.nbytes
    return p, descs, keep


class Model:
    """Weights of one GGUF file on one device."""

    def __init__(self, path: str | os.PathLike | GGUFFile, device: str = "cpu",
                 n_threads: int | None = None, n_cpu_moe: int | None = None,
                 own_file: bool | None = None):
        """own_file: close the file with the model (default: only a file opened
        here from a path; a caller that opened a GGUFFile for this model alone
        passes True)."""
        self._ptr = None
        self._guard = Guard("model")
        self._contexts: weakref.WeakSet = weakref.WeakSet()
        self.file = path if isinstance(path, GGUFFile) else GGUFFile(path)
        self._own_file = not isinstance(path, GGUFFile) if own_file is None else bool(own_file)
        self.hparams = model_params(self.file)
        check_finite(self.file, WEIGHT_TYPES)   # the core refuses the other types by name
        self.device = device
        p, descs, self._keep = model_params_of(self.file.tensors, self.hparams, device,
                                               n_threads)
        p.n_cpu_moe = _int32("n_cpu_moe", n_cpu_moe or 0)   # MoE: experts kept on the host
        self.n_cpu_moe = int(p.n_cpu_moe)   # its contexts' budgets count the device's part
        out = ffi.new("lkv_model **")
        _check(lib.lkv_model_create(p, descs, len(self.file.tensors), out),
               f"loading {self.file.path}")
        self._ptr = ffi.gc(out[0], lib.lkv_model_free)
        self._keep = None  # names are read only while the model is created

    @property
    def ptr(self):
        if self._ptr is None:
            raise ClosedError("the model is closed")
        return self._ptr

    @property
    def n_vocab(self) -> int:
        return self.hparams["n_vocab"]

    @property
    def weight_bytes(self) -> int:
        return self._guard.call(lambda: int(lib.lkv_model_weight_bytes(self.ptr)))

    def _attach(self, make_context):
        """make_context(model pointer) under the model's lock (close waits for it)."""
        return self._guard.call(lambda: make_context(self.ptr))

    @property
    def n_layer_kv(self) -> int:
        """Layers with a KV cache (a hybrid's full-attention layers only)."""
        return int(lib.lkv_model_n_layer_kv(self.ptr))

    @property
    def n_nextn(self) -> int:
        """MTP (nextn) blocks loaded with the model (run by Context(mtp=True))."""
        return int(lib.lkv_model_n_nextn(self.ptr))

    def close(self) -> None:
        """Frees the weights; contexts still open on this model are closed first
        (each after its decode in progress, if any)."""
        def free() -> None:
            for ctx in list(self._contexts):
                ctx.close()
            ptr, self._ptr = self._ptr, None
            if ptr is not None:
                ffi.release(ptr)
            if self._own_file:
                self.file.close()
        self._guard.close(free)

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------- context

def context_params(*, n_ctx: int = 4096, n_batch: int = 512, n_ubatch: int = 512,
                   n_threads: int | None = None, type_k: str | int = "f16",
                   type_v: str | int = "f16", kv_chunk: int = 0, logits_all: bool = False,
                   kv_pool_bytes: int | None = None, gpu_kernels: str = "fast",
                   embeddings: bool = False, n_state_snapshots: int | None = None,
                   n_seq_max: int = 1, phase_arena: bool | None = None, mtp: bool = False):
    """An lkv_context_params * from Context's arguments, each checked."""
    p = ffi.new("lkv_context_params *")
    lib.lkv_context_params_init(p)
    for name, v in dict(n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_ubatch,
                        kv_chunk=kv_chunk, n_seq_max=n_seq_max).items():
        setattr(p, name, _int32(name, v))
    p.n_threads = _int32("n_threads", n_threads or 0)
    p.type_k = type_id(type_k, kv=True)
    p.type_v = type_id(type_v, kv=True)
    p.logits_all = bool(logits_all)
    p.kv_pool_bytes = -1 if kv_pool_bytes is None else _int32(
        "kv_pool_bytes", kv_pool_bytes, 2**63 - 1)
    p.gpu_kernels = int(check_gpu_kernels(gpu_kernels) == "fast")
    p.embeddings = int(bool(embeddings))
    # the prefill workspace lent to the KV while decoding (native/src/arena.h);
    # None: the backend's default (on for CUDA with a pool bound)
    p.phase_arena = -1 if phase_arena is None else int(bool(phase_arena))
    p.mtp = int(bool(mtp))   # the MTP block beside the trunk (mtp_draft)
    if n_state_snapshots is not None:   # hybrids: recurrent-state snapshots (core default 2)
        p.n_state_snapshots = int(n_state_snapshots)
    return p


class Context(SequencesMixin, MTPMixin, GenerateMixin):
    """A KV cache and the buffers to decode into it, over one Model; with
    n_seq_max > 1, that many sequences (each n_ctx positions, its own cache)
    sharing one KV pool (the sequence calls are in _native_seqs.py; the calls
    without a sequence id mean sequence 0). With mtp, the model's MTP block
    beside the trunk (its calls: _native_mtp.py)."""

    def __init__(self, model: Model, *, n_ctx: int = 4096, n_batch: int = 512,
                 n_ubatch: int = 512, n_threads: int | None = None, type_k: str | int = "f16",
                 type_v: str | int = "f16", kv_chunk: int = 0, logits_all: bool = False,
                 kv_pool_bytes: int | None = None, gpu_kernels: str = "fast",
                 embeddings: bool = False, n_state_snapshots: int | None = None,
                 n_seq_max: int = 1, phase_arena: bool | None = None, mtp: bool = False):
        self._ptr = None
        self._guard = Guard("context")
        self.model = model
        p = context_params(n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_ubatch, n_threads=n_threads,
                           type_k=type_k, type_v=type_v, kv_chunk=kv_chunk,
                           logits_all=logits_all, kv_pool_bytes=kv_pool_bytes,
                           gpu_kernels=gpu_kernels, embeddings=embeddings,
                           n_state_snapshots=n_state_snapshots, n_seq_max=n_seq_max,
                           phase_arena=phase_arena, mtp=mtp)
        self.logits_all = bool(logits_all)
        self.mtp = bool(mtp)
        self.embeddings = bool(embeddings)   # rows are hidden states, not logits
        self.n_seq_max = int(n_seq_max)
        self.n_ubatch = min(int(n_ubatch), int(n_batch), int(n_ctx))   # the core's caps (context.c)
        out = ffi.new("lkv_context **")

        def create(model_ptr):
            _check(lib.lkv_context_create(model_ptr, p, out), "creating the context")
            model._contexts.add(self)
            return ffi.gc(out[0], lib.lkv_context_free)
        self._ptr = model._attach(create)
        self.n_vocab = model.n_vocab
        # floats per output row: logits, or hidden states with embeddings
        self.out_width = model.hparams["n_embd"] if embeddings else model.n_vocab

    @property
    def ptr(self):
        if self._ptr is None:
            raise ClosedError("the context is closed")
        return self._ptr

    @property
    def ctx(self):
        """The core's context handle, None once closed (llama-cpp-python's LlamaContext.ctx)."""
        return self._ptr

    @property
    def n_tokens(self) -> int:
        return self._guard.call(self._n_tokens)

    def _n_tokens(self) -> int:
        return int(lib.lkv_context_n_tokens(self.ptr))

    @property
    def n_ctx(self) -> int:
        return self._guard.call(lambda: int(lib.lkv_context_n_ctx(self.ptr)))

    def decode(self, tokens: Sequence[int], pos0: int | None = None, n_logits: int = 0) -> None:
        """Appends tokens, keeping the logits of the last n_logits of them (0: the
        last one, or all with logits_all); all or nothing (also when interrupted:
        KeyboardInterrupt during a decode of several tokens stops it and leaves
        the cache as it was)."""
        arr = np.ascontiguousarray(tokens, dtype=np.int64)
        if arr.ndim != 1:
            raise ParameterError("tokens must be a 1-D sequence of token ids")
        if arr.size and (arr.min() < -2**31 or arr.max() >= 2**31):
            raise ParameterError(f"tokens: id {int(arr.max())} out of range [0, {self.n_vocab})")
        arr = arr.astype(np.int32)
        n_logits = _int32("n_logits", n_logits)
        self._guard.call(self._decode, arr, pos0, n_logits)

    def _decode(self, arr: np.ndarray, pos0: int | None, n_logits: int) -> None:
        ptr = self.ptr
        self.model.file.check_unchanged()     # a truncated map would SIGBUS (reader.py)
        pos = int(lib.lkv_context_n_tokens(ptr)) if pos0 is None else _int32("pos0", pos0)
        buf = ffi.from_buffer("int32_t[]", arr)

        def run() -> None:
            _check(lib.lkv_decode_ex(ptr, buf, len(arr), pos, n_logits), "decode")
        if len(arr) <= 1:
            run()
        else:
            abortable(run, lambda on: lib.lkv_context_set_abort(ptr, int(on)))

    def logits(self) -> np.ndarray:
        return self._guard.call(self._logits)

    def _logits(self) -> np.ndarray:
        """Logits of the last decode, (rows, n_vocab) float32 (a copy); with
        embeddings the final-normed hidden states, (rows, n_embd)."""
        n = ffi.new("int32_t *")
        ptr = lib.lkv_context_logits(self.ptr, n)
        if n[0] == 0:
            return np.zeros((0, self.out_width), np.float32)
        buf = ffi.buffer(ptr, n[0] * self.out_width * 4)
        return np.frombuffer(buf, np.float32).reshape(n[0], self.out_width).copy()

    def truncate(self, n: int) -> None:
        n = _int32("n", n)
        self._guard.call(lambda: _check(lib.lkv_context_truncate(self.ptr, n), "truncate"))

    def reset(self) -> None:
        self.truncate(0)

    @property
    def recurrent_bytes(self) -> int:
        """Bytes of the recurrent state of a hybrid model (0 for others)."""
        return int(lib.lkv_context_recurrent_bytes(self.ptr))

    def restore_point(self, n: int) -> int:
        """The largest position <= n that truncate accepts (hybrids: 0, a snapshot or n_tokens);
        with the MTP block on, one where the block is also in sync (_native_mtp.py)."""
        return int(lib.lkv_context_restore_point(self.ptr, int(n)))

    def snapshot(self) -> None:
        """Hybrids: keep the recurrent state here so a later truncate can return to it."""
        _check(lib.lkv_context_snapshot(self.ptr), "snapshot")

    def state_get(self) -> bytes:
        return self._guard.call(self._state_get)

    def _state_get(self) -> bytes:
        size = ffi.new("uint64_t *")
        _check(lib.lkv_context_state_size(self.ptr, size), "state size")
        buf = bytearray(size[0])
        _check(lib.lkv_context_state_get(self.ptr, ffi.from_buffer(buf), size[0]), "save state")
        return bytes(buf)

    def state_set(self, blob: bytes) -> None:
        self._guard.call(lambda: _check(lib.lkv_context_state_set(
            self.ptr, ffi.from_buffer(blob), len(blob)), "load state"))

    def kv_stats(self) -> dict[str, Any]:
        return self._guard.call(self._kv_stats)

    def _kv_stats(self) -> dict[str, Any]:
        """The cache's counters; n_layer counts the layers with KV (for a hybrid its
        full-attention layers only; with a pool bound, for a sliding-window model
        its global layers only, local_layers the others, resident beside the
        pool) and resident_chunks has one entry per such layer."""
        st = ffi.new("lkv_kv_stats *")
        nl = self.model.n_layer_kv
        res = ffi.new("int32_t[]", nl)
        _check(lib.lkv_context_kv_stats(self.ptr, st, res), "kv stats")
        d = {name: int(getattr(st, name)) for name, _ in ffi.typeof("lkv_kv_stats").fields}
        d["resident_chunks"] = list(res)[:d["n_layer"]]   # per planned attention layer
        d["n_ubatch"] = self.n_ubatch
        return d

    def close(self) -> None:
        """Frees the cache (idempotent); waits for a decode in progress."""
        def free() -> None:
            ptr, self._ptr = self._ptr, None
            if ptr is not None:
                ffi.release(ptr)
        self._guard.close(free)

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
