"""The sequence calls of ``_native.Context`` (a mixin): several sequences in
one context, each with its own positions and KV cache, sharing one pool.

``decode_batch`` runs tokens of several sequences in one step (the weights are
read once for all of them); each sequence's tokens must be contiguous and in
order, and go at that sequence's next positions. ``logits()`` then has one row
per kept token, in token order. Sequence ids are 0 .. n_seq_max - 1; the calls
without one (``decode``, ``truncate``, ``n_tokens``...) mean sequence 0.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .ffi import ffi, lib
from .status import check as _check, int32 as _int32
from ..errors import ParameterError
from ..engine.guard import abortable


def _ids(name: str, values, n: int | None = None) -> np.ndarray:
    arr = np.ascontiguousarray(values, dtype=np.int64)
    if arr.ndim != 1:
        raise ParameterError(f"{name} must be a 1-D sequence of ints")
    if n is not None and arr.size != n:
        raise ParameterError(f"{name} has {arr.size} entries for {n} tokens")
    if arr.size and (arr.min() < -2**31 or arr.max() >= 2**31):
        raise ParameterError(f"{name}: {int(arr.max())} is out of range")
    return arr.astype(np.int32)


class SequencesMixin:
    """Needs ptr, _guard (see _native.Context)."""

    def decode_batch(self, tokens: Sequence[int], seq_ids: Sequence[int],
                     want_logits: Sequence[bool] | None = None) -> int:
        """Decodes tokens[i] for sequence seq_ids[i]; keeps the logits of the tokens
        with want_logits[i] (None: the last token of each sequence, or all with
        logits_all). All or nothing. Returns the number of logits rows."""
        toks = _ids("tokens", tokens)
        seqs = _ids("seq_ids", seq_ids, toks.size)
        want = None
        if want_logits is not None:
            want = np.ascontiguousarray(want_logits, dtype=bool)
            if want.ndim != 1 or want.size != toks.size:
                raise ParameterError(f"want_logits must have one entry per token ({toks.size})")
            want = want.astype(np.int8)
        return self._guard.call(self._decode_batch, toks, seqs, want)

    def decode_batch_logits(self, tokens: Sequence[int], seq_ids: Sequence[int],
                            want_logits: Sequence[bool] | None = None) -> np.ndarray:
        """decode_batch and its logits rows, as one call (no truncate or copy of
        another thread between them can drop the rows)."""
        toks = _ids("tokens", tokens)
        seqs = _ids("seq_ids", seq_ids, toks.size)
        want = None if want_logits is None else np.asarray(want_logits, dtype=bool)
        if want is not None and (want.ndim != 1 or want.size != toks.size):
            raise ParameterError(f"want_logits must have one entry per token ({toks.size})")

        def run() -> np.ndarray:
            self._decode_batch(toks, seqs, None if want is None else want.astype(np.int8))
            return self._logits()
        return self._guard.call(run)

    def _decode_batch(self, toks: np.ndarray, seqs: np.ndarray, want: np.ndarray | None) -> int:
        ptr = self.ptr
        self.model.file.check_unchanged()     # a truncated map would SIGBUS (reader.py)
        bt = ffi.from_buffer("int32_t[]", toks)
        bs = ffi.from_buffer("int32_t[]", seqs)
        bw = ffi.NULL if want is None else ffi.from_buffer("int8_t[]", want)

        def run() -> None:
            _check(lib.lkv_decode_batch(ptr, bt, bs, bw, len(toks)), "decode_batch")
        if len(toks) <= 1:
            run()
        else:
            abortable(run, lambda on: lib.lkv_context_set_abort(ptr, int(on)))
        n = ffi.new("int32_t *")
        lib.lkv_context_logits(ptr, n)
        return int(n[0])

    def seq_n_tokens(self, seq: int) -> int:
        """Positions sequence seq holds."""
        n = self._guard.call(lambda: int(lib.lkv_context_seq_n_tokens(self.ptr, int(seq))))
        if n < 0:
            raise ParameterError(f"sequence id {seq} is outside [0, n_seq_max = {self.n_seq_max})")
        return n

    def seq_truncate(self, seq: int, n: int) -> None:
        """Drops positions >= n of sequence seq."""
        seq, n = _int32("seq", seq), _int32("n", n)
        self._guard.call(lambda: _check(lib.lkv_context_seq_truncate(self.ptr, seq, n),
                                        "seq_truncate"))

    def seq_reset(self, seq: int) -> None:
        """Empties sequence seq (its share of the pool goes to the others)."""
        self.seq_truncate(seq, 0)

    def seq_copy(self, src: int, dst: int, n: int | None = None) -> None:
        """Sequence dst becomes the first n positions (None: all) of src, copied
        from src's cache, not recomputed."""
        src, dst = _int32("src", src), _int32("dst", dst)

        def copy() -> None:
            k = int(lib.lkv_context_seq_n_tokens(self.ptr, src)) if n is None else _int32("n", n)
            _check(lib.lkv_context_seq_copy(self.ptr, src, dst, k), "seq_copy")
        self._guard.call(copy)

    def seq_restore_point(self, seq: int, n: int) -> int:
        """restore_point of sequence seq (hybrids: 0, one of its snapshots or its length)."""
        seq, n = _int32("seq", seq), _int32("n", n)
        return self._guard.call(lambda: int(lib.lkv_context_seq_restore_point(self.ptr, seq, n)))

    def seq_snapshot(self, seq: int) -> None:
        """snapshot of sequence seq (hybrids: its recurrent state at its length)."""
        seq = _int32("seq", seq)
        self._guard.call(lambda: _check(lib.lkv_context_seq_snapshot(self.ptr, seq),
                                        "seq_snapshot"))

    def seq_kv_stats(self, seq: int) -> dict[str, Any]:
        """kv_stats() of sequence seq's cache (pool_bytes: its share of the pool),
        with n_tokens (the positions it holds) and, per attention layer, the
        chunks those positions fill that are not resident (streamed_chunks)."""
        seq = _int32("seq", seq)

        def stats() -> dict[str, Any]:
            st = ffi.new("lkv_kv_stats *")
            res = ffi.new("int32_t[]", self.model.n_layer_kv)
            _check(lib.lkv_context_seq_kv_stats(self.ptr, seq, st, res), "seq kv stats")
            d = {name: int(getattr(st, name)) for name, _ in ffi.typeof("lkv_kv_stats").fields}
            d["resident_chunks"] = list(res)[:d["n_layer"]]   # planned layers (kv_stats)
            n = int(lib.lkv_context_seq_n_tokens(self.ptr, seq))
            used = -(-n // d["kv_chunk"]) if d["kv_chunk"] else 0
            d["n_tokens"] = n
            d["streamed_chunks"] = [max(0, used - r) for r in d["resident_chunks"]]
            return d
        return self._guard.call(stats)

    def seq_state_get(self, seq: int) -> bytes:
        """The core's state of sequence seq (the format of state_get, which is
        sequence 0's): it loads into any sequence of a context of the same
        model and geometry."""
        seq = _int32("seq", seq)

        def get() -> bytes:
            size = ffi.new("uint64_t *")
            _check(lib.lkv_context_seq_state_size(self.ptr, seq, size), "state size")
            buf = bytearray(size[0])
            _check(lib.lkv_context_seq_state_get(self.ptr, seq, ffi.from_buffer(buf), size[0]),
                   "save state")
            return bytes(buf)
        return self._guard.call(get)

    def seq_state_set(self, seq: int, blob) -> None:
        """Sequence seq becomes the saved state blob (checked whole first; on a
        bad blob nothing changes); the other sequences are not touched."""
        seq = _int32("seq", seq)
        self._guard.call(lambda: _check(lib.lkv_context_seq_state_set(
            self.ptr, seq, ffi.from_buffer(blob), len(blob)), "load state"))


def pool_shares(pool_bytes: int, active: Sequence[bool], min_share: int = 0
                ) -> list[tuple[int, int]]:
    """The planner's split of one pool among sequences (native/src/kv/plan.h):
    (offset, bytes) per sequence."""
    n = len(active)
    act = ffi.new("int32_t[]", [int(bool(a)) for a in active])
    off, size = ffi.new("int64_t[]", n), ffi.new("int64_t[]", n)
    _check(lib.lkv_plan_pool_shares(int(pool_bytes), n, act, int(min_share), off, size),
           "pool shares")
    return [(int(off[i]), int(size[i])) for i in range(n)]
