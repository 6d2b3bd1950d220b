"""Generation inside the core (``lkv_generate``), a mixin of ``_native.Context``:
up to n_max tokens per call, each picked where the logits are (greedy on a GPU:
only the token id comes back) or by the core's sampler chain (``chain``: the
Python sampler's fields, engine/core_chain.py), stopping at a stop id. The
cache ends holding every returned token but the last (llamakv.h).
``sample_row`` is one pick of that chain from a given row (``lkv_sample``).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from .ffi import ffi, lib
from .status import check as _check, int32 as _int32
from ..engine.guard import abortable

# lkv_generate_params' sampler fields (llamakv.h, ABI 9)
CHAIN_FIELDS = ("temperature", "top_k", "top_p", "min_p", "typical_p", "repeat_penalty",
                "frequency_penalty", "presence_penalty", "repeat_last_n")


def has_generate() -> bool:
    """Whether the loaded library has lkv_generate (a stale build may not)."""
    try:
        return bool(lib.lkv_generate)
    except AttributeError:
        return False


def _params(n_max: int, stop_ids: Sequence[int], logit_bias: Mapping[int, float] | None,
            chain: Mapping[str, Any] | None, keep: list):
    """An lkv_generate_params; keep holds the arrays it points into. chain: CHAIN_FIELDS
    values, and history (int32 ids), rng (uint64 (4,), advanced in place), drawn (uint8 out)."""
    p = ffi.new("lkv_generate_params *")
    lib.lkv_generate_params_init(p)
    p.n_max = n_max
    stops = np.ascontiguousarray(list(stop_ids), np.int32)
    bias = logit_bias or {}
    bias_ids = np.fromiter(bias.keys(), np.int32, len(bias))
    bias_v = np.fromiter(bias.values(), np.float64, len(bias))
    keep += [stops, bias_ids, bias_v]
    p.n_stop = stops.size
    p.stop_ids = ffi.from_buffer("int32_t[]", stops) if stops.size else ffi.NULL
    p.n_bias = bias_ids.size
    p.bias_ids = ffi.from_buffer("int32_t[]", bias_ids) if bias_ids.size else ffi.NULL
    p.bias = ffi.from_buffer("double[]", bias_v) if bias_v.size else ffi.NULL
    if chain:
        for name in CHAIN_FIELDS:
            if name in chain:
                setattr(p, name, chain[name])
        hist = np.ascontiguousarray(chain.get("history", ()), np.int32)
        keep.append(hist)
        p.n_history = hist.size
        p.history = ffi.from_buffer("int32_t[]", hist) if hist.size else ffi.NULL
        for name, ctype, dtype, size in (("rng", "uint64_t[]", np.uint64, 4),
                                         ("drawn", "uint8_t[]", np.uint8, n_max)):
            a = chain.get(name)
            if a is not None:
                if a.dtype != dtype or not a.flags.c_contiguous or a.size < size:
                    raise ValueError(f"chain[{name!r}] must be a contiguous {np.dtype(dtype)} array "
                                     f"of at least {size}")
                setattr(p, "rng_state" if name == "rng" else name, ffi.from_buffer(ctype, a))
    return p


def sample_row(logits: np.ndarray, logit_bias: Mapping[int, float] | None = None,
               chain: Mapping[str, Any] | None = None) -> tuple[int, bool]:
    """One pick of the core's chain from logits (n_vocab,) float32 (llamakv.h
    lkv_sample): (the id or -1, whether a number was drawn from chain['rng'])."""
    row = np.ascontiguousarray(logits, np.float32).reshape(-1)
    keep: list = []
    p = _params(1, (), logit_bias, chain, keep)
    tok, drew = ffi.new("int32_t *"), ffi.new("int32_t *")
    _check(lib.lkv_sample(ffi.from_buffer("float[]", row), _int32("n_vocab", row.size), p, tok, drew),
           "sample")
    return int(tok[0]), bool(drew[0])


class GenerateMixin:
    """Needs ptr and _guard (see _native.Context)."""

    def generate(self, n_max: int, token: int = -1, stop_ids: Sequence[int] = (),
                 logit_bias: Mapping[int, float] | None = None,
                 chain: Mapping[str, Any] | None = None) -> np.ndarray:
        """Greedy ids, or the chain's (llamakv.h lkv_generate): with token >= 0 it
        is decoded first. A failure raises with the ids made before it in ``.partial``."""
        n_max = _int32("n_max", n_max)
        out = np.zeros(max(n_max, 1), np.int32)
        keep: list = []
        p = _params(n_max, stop_ids, logit_bias, chain, keep)
        n = ffi.new("int32_t *")
        tok = -1 if isinstance(token, (int, np.integer)) and not isinstance(token, bool) and token < 0 \
            else _int32("token", token)
        err: list[BaseException] = []

        def call() -> None:   # the check where the call ran: the core's message is per thread
            try:
                _check(lib.lkv_generate(self.ptr, tok, p, ffi.from_buffer("int32_t[]", out), n), "generate")
            except BaseException as e:   # noqa: BLE001 (re-raised below, with the ids made)
                err.append(e)

        def run() -> None:
            if n_max <= 4:
                call()
            else:
                ptr = self.ptr
                abortable(call, lambda on: lib.lkv_context_set_abort(ptr, int(on)))
        try:
            self._guard.call(run)
        except BaseException as e:   # an interrupt while waiting: the ids made still count
            e.partial = out[:n[0]].copy()
            raise
        got = out[:n[0]].copy()
        if err:
            err[0].partial = got
            raise err[0]
        return got
