"""The MTP calls of ``_native.Context`` (a mixin): a qwen35 model's MTP
(nextn) block run beside the trunk (native/src/mtp.h), for a context made
with ``mtp=True``.

The block starts switched on; ``set_mtp(False)`` stops it, so a context that
does not speculate runs the trunk alone. Switched on again after positions
were decoded while it was off, it drafts nothing until it is in sync:
``restore_point`` (while it is on) names where to truncate to, and decoding
the rest again fills its rows (Sequence.keep_prefix does exactly that).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .ffi import ffi, lib
from .status import check as _check, int32 as _int32


class MTPMixin:
    """Needs ptr, _guard, n_vocab and mtp (see _native.Context). With several
    sequences each has its own block (its rows, hidden states, switch): seq
    names which; set_mtp without seq switches every sequence's."""

    def mtp_draft(self, token: int, n_draft: int, logits: bool = False, seq: int = 0):
        """Arg-max drafts of sequence seq's MTP block after `token` (the token at
        its n_tokens), up to n_draft; with logits, (drafts, (len, n_vocab) logits).
        None drafted (an empty array) when the block is out of sync (llamakv.h)."""
        n_draft = _int32("n_draft", n_draft)
        seq = _int32("seq", seq)
        out = np.zeros(max(n_draft, 0), np.int32)
        rows = np.zeros((max(n_draft, 0), self.n_vocab), np.float32) if logits else None
        n = ffi.new("int32_t *")
        self._guard.call(lambda: _check(lib.lkv_context_seq_mtp_draft(
            self.ptr, seq, _int32("token", token), n_draft, ffi.from_buffer("int32_t[]", out),
            ffi.from_buffer("float[]", rows) if logits else ffi.NULL, n), "mtp draft"))
        return (out[:n[0]], rows[:n[0]]) if logits else out[:n[0]]

    def set_mtp(self, on: bool, seq: int | None = None) -> None:
        """Switch the MTP block on or off (lkv_context_set_mtp): sequence seq's,
        or every sequence's (seq None); on needs mtp=True."""
        if seq is None:
            self._guard.call(lambda: _check(lib.lkv_context_set_mtp(self.ptr, int(bool(on))),
                                            "set mtp"))
        else:
            seq = _int32("seq", seq)
            self._guard.call(lambda: _check(lib.lkv_context_seq_set_mtp(
                self.ptr, seq, int(bool(on))), "set mtp"))

    def mtp_on_for(self, seq: int = 0) -> bool:
        """The block exists and sequence seq's is switched on."""
        return bool(self.mtp) and bool(self.mtp_stats(seq)["on"])

    @property
    def mtp_on(self) -> bool:
        """The block exists and sequence 0's is switched on."""
        return self.mtp_on_for(0)

    def mtp_stats(self, seq: int = 0) -> dict[str, Any]:
        """Sequence seq's block: its switch, its rows, whether it drafts now, and
        its counters (rows_computed: K/V rows written following the trunk;
        draft_steps)."""
        seq = _int32("seq", seq)
        st = ffi.new("lkv_mtp_stats *")
        self._guard.call(lambda: _check(lib.lkv_context_seq_mtp_stats(self.ptr, seq, st),
                                        "mtp stats"))
        return {name: int(getattr(st, name)) for name, _ in ffi.typeof("lkv_mtp_stats").fields}
