"""Greedy generation inside the core (``lkv_generate``), a mixin of
``_native.Context``: up to n_max tokens per call, each picked where the
logits are (on a GPU only the token id comes back), stopping at a stop id.
The cache ends holding every returned token but the last (llamakv.h).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from .ffi import ffi, lib
from .status import check as _check, int32 as _int32
from ..engine.guard import abortable


def has_generate() -> bool:
    """Whether the loaded library has lkv_generate (a stale build may not)."""
    try:
        return bool(lib.lkv_generate)
    except AttributeError:
        return False


class GenerateMixin:
    """Needs ptr and _guard (see _native.Context)."""

    def generate(self, n_max: int, token: int = -1, stop_ids: Sequence[int] = (),
                 logit_bias: Mapping[int, float] | None = None) -> np.ndarray:
        """Greedy ids (llamakv.h lkv_generate): with token >= 0 it is decoded
        first. A failure raises with the ids made before it in ``.partial``."""
        n_max = _int32("n_max", n_max)
        out = np.zeros(max(n_max, 1), np.int32)
        stops = np.ascontiguousarray(list(stop_ids), np.int32)
        bias = logit_bias or {}
        bias_ids = np.fromiter(bias.keys(), np.int32, len(bias))
        bias_v = np.fromiter(bias.values(), np.float64, len(bias))
        p = ffi.new("lkv_generate_params *")
        lib.lkv_generate_params_init(p)
        p.n_max = n_max
        p.n_stop = stops.size
        p.stop_ids = ffi.from_buffer("int32_t[]", stops) if stops.size else ffi.NULL
        p.n_bias = bias_ids.size
        p.bias_ids = ffi.from_buffer("int32_t[]", bias_ids) if bias_ids.size else ffi.NULL
        p.bias = ffi.from_buffer("double[]", bias_v) if bias_v.size else ffi.NULL
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
