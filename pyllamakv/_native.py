"""Model and Context: the owners of the core's handles.

``Model`` turns a GGUF file into the core's model description (hyper-parameters
and one pointer per tensor into the file's memory map); ``Context`` decodes
tokens and exposes logits as numpy arrays. Failures of the core become
exceptions carrying the core's message. Handles are released by ``close()``
(idempotent), by ``with``, and by the garbage collector as a last resort.
"""
from __future__ import annotations

import os
import weakref
from typing import Any, Sequence

import numpy as np

from ._ffi import ffi, last_error, lib
from .errors import error_for_status
from .gguf_file import GGUFError, GGUFFile

ARCHS = {"llama": 0, "mistral": 0, "qwen2": 1, "qwen3": 2}
DEVICE_CPU, DEVICE_CUDA = 0, 1


def _check(status: int, what: str) -> None:
    if status != 0:
        raise error_for_status(status, f"{what}: {last_error()}")


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


def row_bytes(t: str | int, n: int) -> int:
    return int(lib.lkv_row_bytes(type_id(t), n))


def cuda_device_count() -> int:
    return int(lib.lkv_cuda_device_count())


# ---------------------------------------------------------------- hyper-parameters

def model_params(f: GGUFFile) -> dict[str, Any]:
    """The core's model parameters read from GGUF metadata, as a dict."""
    arch = f.architecture
    if arch not in ARCHS:
        raise GGUFError(f"{f.path}: unsupported architecture {arch!r}; supported: "
                        f"{', '.join(sorted(ARCHS))}")
    k = f.arch_key
    n_embd = k("embedding_length")
    n_head = k("attention.head_count")
    if n_embd is None or n_head is None or k("block_count") is None:
        raise GGUFError(f"{f.path}: metadata lacks {arch}.embedding_length, block_count or "
                        "attention.head_count")
    if isinstance(n_head, list):
        raise GGUFError(f"{f.path}: per-layer head counts are not supported")
    head_dim = k("attention.key_length", n_embd // n_head)
    tokens = f.get("tokenizer.ggml.tokens")
    embd = next((t for t in f.tensors if t.name == "token_embd.weight"), None)
    n_vocab = k("vocab_size") or (len(tokens) if tokens else None) or (embd.shape[1] if embd else 0)
    scale = 1.0
    if k("rope.scaling.type") == "linear" and k("rope.scaling.factor"):
        scale = 1.0 / float(k("rope.scaling.factor"))
    return dict(
        arch=ARCHS[arch], n_vocab=int(n_vocab), n_embd=int(n_embd),
        n_layer=int(k("block_count")), n_head=int(n_head),
        n_head_kv=int(k("attention.head_count_kv", n_head)), head_dim=int(head_dim),
        n_ff=int(k("feed_forward_length", 0)), n_ctx_train=int(k("context_length", 0)),
        rope_dim=int(k("rope.dimension_count", head_dim)),
        rms_eps=float(k("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_freq_base=float(k("rope.freq_base", 10000.0)), rope_freq_scale=scale)


# ---------------------------------------------------------------- model

class Model:
    """Weights of one GGUF file on one device."""

    def __init__(self, path: str | os.PathLike | GGUFFile, device: str = "cpu",
                 n_threads: int | None = None):
        self._ptr = None
        self.file = path if isinstance(path, GGUFFile) else GGUFFile(path)
        self.hparams = model_params(self.file)
        self.device = device
        p = ffi.new("lkv_model_params *")
        lib.lkv_model_params_init(p)
        for name, value in self.hparams.items():
            setattr(p, name, value)
        p.device = {"cpu": DEVICE_CPU, "cuda": DEVICE_CUDA}[device]
        p.n_threads = int(n_threads or 0)
        ts = self.file.tensors
        descs = ffi.new("lkv_tensor_desc[]", max(len(ts), 1))
        self._keep = []
        for d, t in zip(descs, ts):
            name = ffi.new("char[]", t.name.encode())
            self._keep.append(name)
            d.name = name
            d.type = t.type
            d.n_dims = len(t.shape)
            for i, n in enumerate(t.shape[:4]):
                d.ne[i] = n
            d.data = ffi.from_buffer(t.data) if t.nbytes else ffi.NULL
            d.nbytes = t.nbytes
        out = ffi.new("lkv_model **")
        _check(lib.lkv_model_create(p, descs, len(ts), out), f"loading {self.file.path}")
        self._raw = out[0]
        self._ptr = ffi.gc(self._raw, lib.lkv_model_free)
        self._contexts: weakref.WeakSet = weakref.WeakSet()
        self._keep = None  # names are read only while the model is created

    @property
    def ptr(self):
        if self._ptr is None:
            raise ValueError("the model is closed")
        return self._ptr

    @property
    def n_vocab(self) -> int:
        return self.hparams["n_vocab"]

    @property
    def weight_bytes(self) -> int:
        return int(lib.lkv_model_weight_bytes(self.ptr))

    def close(self) -> None:
        """Frees the weights; contexts still open on this model are closed first."""
        if self._ptr is not None:
            for ctx in list(self._contexts):
                ctx.close()
            ffi.gc(self._ptr, None)
            self._ptr = None
            lib.lkv_model_free(self._raw)

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------- context

class Context:
    """A KV cache and the buffers to decode into it, over one Model."""

    def __init__(self, model: Model, n_ctx: int = 4096, n_batch: int = 512, n_ubatch: int = 512,
                 n_threads: int | None = None, type_k: str | int = "f16",
                 type_v: str | int = "f16", kv_chunk: int = 0, logits_all: bool = False,
                 kv_pool_bytes: int | None = None, gpu_kernels: str = "exact"):
        self._ptr = None
        self.model = model
        p = ffi.new("lkv_context_params *")
        lib.lkv_context_params_init(p)
        for name, v in dict(n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_ubatch,
                            kv_chunk=kv_chunk).items():
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{name} must be an int, not {type(v).__name__}")
            setattr(p, name, int(v))
        p.n_threads = int(n_threads or 0)
        p.type_k = type_id(type_k, kv=True)
        p.type_v = type_id(type_v, kv=True)
        p.logits_all = bool(logits_all)
        if kv_pool_bytes is not None and (isinstance(kv_pool_bytes, bool) or
                                          not isinstance(kv_pool_bytes, (int, np.integer))):
            raise TypeError(f"kv_pool_bytes must be None or an int, not {kv_pool_bytes!r}")
        if kv_pool_bytes is not None and kv_pool_bytes < 0:
            raise ValueError(f"kv_pool_bytes must be >= 0 (got {kv_pool_bytes})")
        p.kv_pool_bytes = -1 if kv_pool_bytes is None else int(kv_pool_bytes)
        if gpu_kernels not in ("exact", "fast"):
            raise ValueError(f"gpu_kernels must be 'exact' or 'fast', got {gpu_kernels!r}")
        p.gpu_kernels = int(gpu_kernels == "fast")
        self.logits_all = bool(logits_all)
        out = ffi.new("lkv_context **")
        _check(lib.lkv_context_create(model.ptr, p, out), "creating the context")
        self._raw = out[0]
        self._ptr = ffi.gc(self._raw, lib.lkv_context_free)
        model._contexts.add(self)
        self.n_vocab = model.n_vocab

    @property
    def ptr(self):
        if self._ptr is None:
            raise ValueError("the context is closed")
        return self._ptr

    @property
    def n_tokens(self) -> int:
        return int(lib.lkv_context_n_tokens(self.ptr))

    @property
    def n_ctx(self) -> int:
        return int(lib.lkv_context_n_ctx(self.ptr))

    def decode(self, tokens: Sequence[int], pos0: int | None = None, n_logits: int = 0) -> None:
        """Decode tokens; keep the logits of the last n_logits of them (0: the
        last one, or all with logits_all)."""
        arr = np.ascontiguousarray(tokens, dtype=np.int32)
        if arr.ndim != 1:
            raise ValueError("tokens must be a 1-D sequence of ids")
        pos = self.n_tokens if pos0 is None else int(pos0)
        _check(lib.lkv_decode_ex(self.ptr, ffi.from_buffer("int32_t[]", arr), len(arr), pos,
                                 int(n_logits)), "decode")

    def logits(self) -> np.ndarray:
        """Logits of the last decode, (rows, n_vocab) float32 (a copy)."""
        n = ffi.new("int32_t *")
        ptr = lib.lkv_context_logits(self.ptr, n)
        if n[0] == 0:
            return np.zeros((0, self.n_vocab), np.float32)
        buf = ffi.buffer(ptr, n[0] * self.n_vocab * 4)
        return np.frombuffer(buf, np.float32).reshape(n[0], self.n_vocab).copy()

    def truncate(self, n: int) -> None:
        _check(lib.lkv_context_truncate(self.ptr, int(n)), "truncate")

    def reset(self) -> None:
        self.truncate(0)

    def state_get(self) -> bytes:
        size = ffi.new("uint64_t *")
        _check(lib.lkv_context_state_size(self.ptr, size), "state size")
        buf = bytearray(size[0])
        _check(lib.lkv_context_state_get(self.ptr, ffi.from_buffer(buf), size[0]), "save state")
        return bytes(buf)

    def state_set(self, blob: bytes) -> None:
        _check(lib.lkv_context_state_set(self.ptr, ffi.from_buffer(blob), len(blob)),
               "load state")

    def kv_stats(self) -> dict[str, Any]:
        st = ffi.new("lkv_kv_stats *")
        nl = self.model.hparams["n_layer"]
        res = ffi.new("int32_t[]", nl)
        _check(lib.lkv_context_kv_stats(self.ptr, st, res), "kv stats")
        d = {name: int(getattr(st, name)) for name, _ in ffi.typeof("lkv_kv_stats").fields}
        d["resident_chunks"] = list(res)
        return d

    def close(self) -> None:
        if self._ptr is not None:
            ffi.gc(self._ptr, None)
            self._ptr = None
            lib.lkv_context_free(self._raw)

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
