"""History: the tokens a context holds and the logits kept for them.

The C context is the authority: ``n`` is its token count, read from it, never
counted separately in Python. ``input_ids`` is written before a decode (the
rows past ``n`` are invisible until the core takes them) and ``scores`` is
filled from the core's logits by ``sync``, which every reader and every decode
calls first. An exception at any point (KeyboardInterrupt between the decode
and the copy of its logits) therefore leaves nothing to repair: the next
``sync`` copies the logits the core still holds. A decode is all or nothing
in the core, also when it is aborted.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..core import native as _native
from ..errors import ContextFullError
from .guard import atomic


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens a and b share (the one rule for reusing a cache)."""
    n = min(len(a), len(b))
    diff = np.nonzero(np.asarray(a[:n], np.int64) != np.asarray(b[:n], np.int64))[0]
    return int(diff[0]) if diff.size else n


class History:
    def __init__(self, ctx: _native.Context, n_ctx: int, n_vocab: int, n_batch: int,
                 logits_all: bool) -> None:
        self.ctx, self.n_ctx, self.n_vocab, self.n_batch = ctx, n_ctx, n_vocab, n_batch
        self.logits_all = logits_all
        self._ids = np.zeros(n_ctx, np.int32)                                  # (n_ctx,)
        self._scores = np.zeros((n_ctx if logits_all else 1, n_vocab), np.float32)
        self._synced = 0            # positions whose logits are in _scores
        self._stale = False         # the core's loop (greedy_loop.py) decoded since: copy on read

    @property
    def n(self) -> int:
        return self.ctx.n_tokens

    def sync(self) -> int:
        """Bring the scores up to the core's count; returns that count."""
        n = self.ctx.n_tokens
        if n > self._synced:            # a decode Python has not copied yet
            rows = self.ctx.logits()
            if self.logits_all:
                self._scores[n - len(rows):n] = rows
            elif len(rows):
                self._scores[0] = rows[-1]
            self._stale = False
        self._synced = n
        return n

    def _fresh(self) -> None:
        """The last logits copied, if the core's loop left them there."""
        if self._stale:
            rows = self.ctx.logits()
            if len(rows):
                self._scores[0] = rows[-1]
            self._stale = False

    def generated(self, n0: int, pending: int, ids: Sequence[int]) -> None:
        """The core's loop (greedy_loop.py) ran from n0 positions: it decoded
        pending (if >= 0) and then the ids it returned but the last; their
        logits are copied when read."""
        seq = ([pending] if pending >= 0 else []) + [int(t) for t in ids]
        self._ids[n0:n0 + len(seq)] = seq[:self.n_ctx - n0]
        n = self.ctx.n_tokens
        if n > n0:
            self._stale = True
        self._synced = n

    def input_ids(self) -> np.ndarray:
        return self._ids[:self.sync()]

    def scores(self) -> np.ndarray:
        n = self.sync()
        self._fresh()
        return self._scores[:n] if self.logits_all else self._scores

    def last_logits(self) -> np.ndarray:
        n = self.sync()
        self._fresh()
        return self._scores[n - 1 if self.logits_all else 0]

    def eval(self, tokens: Sequence[int], progress=None) -> None:
        """Decode tokens in batches of n_batch; progress("prefill", done, total)
        (progress.py) after each batch when there is more than one."""
        n = self.sync()
        if n + len(tokens) > self.n_ctx:
            raise ContextFullError(f"{n} cached + {len(tokens)} new tokens exceed the context "
                                   f"window (n_ctx={self.n_ctx})")
        report = progress is not None and len(tokens) > self.n_batch
        if report:
            progress("prefill", 0, len(tokens))
        for i in range(0, len(tokens), self.n_batch):
            part = tokens[i:i + self.n_batch]
            self._ids[n:n + len(part)] = part
            self.ctx.decode(part)
            n = self.sync()
            if report:
                progress("prefill", i + len(part), len(tokens))

    def eval_rows(self, tokens: Sequence[int]) -> np.ndarray:
        """Decode tokens in one pass (one batch); the logits of every one of
        them, (len, n_vocab): a speculative verification."""
        n = self.sync()
        if n + len(tokens) > self.n_ctx or len(tokens) > self.n_batch:
            raise ContextFullError(f"{len(tokens)} tokens after {n} exceed the context "
                                   f"(n_ctx={self.n_ctx}) or a batch (n_batch={self.n_batch})")
        self._ids[n:n + len(tokens)] = tokens
        self.ctx.decode(tokens, n_logits=len(tokens))
        rows = self.ctx.logits()
        self.sync()
        return rows

    def prefix(self, n: int) -> np.ndarray:
        """The first n ids written (n may pass the core's count within a verification)."""
        return self._ids[:n]

    def truncate_to_row(self, n: int, logits: np.ndarray) -> None:
        """Truncate to n positions whose last logits are `logits` (a row a
        verification returned), as one step an interrupt cannot split."""
        def run() -> None:
            self.truncate(n)
            if not self.logits_all:
                self._scores[0] = logits
        atomic(run)

    def keep_prefix(self, tokens: list[int]) -> list[int]:
        """Keep the longest cached prefix of tokens (all but the last token at
        most, for its logits); returns the tokens still to evaluate."""
        keep = min(common_prefix(self.input_ids(), tokens), len(tokens) - 1)
        keep = self.ctx.restore_point(keep)   # hybrids: the latest snapshot at or before
        self.truncate(keep)
        return tokens[keep:]

    def truncate(self, n: int) -> None:
        """To n positions; a hybrid whose recurrent state cannot return to n goes
        back to the latest snapshot before it and decodes the tokens between
        again (the speculative rollback: spec_decode.py snapshots before verifying)."""
        self.sync()
        self._fresh()
        back = self.ctx.restore_point(n) if n < self.ctx.n_tokens else n
        self.ctx.truncate(back)
        for i in range(back, n, self.n_batch):
            self.ctx.decode(self._ids[i:min(n, i + self.n_batch)])
        self.sync()

    def restore(self, kv: bytes | memoryview, ids: np.ndarray, scores: np.ndarray) -> None:
        """Replace everything with a checked state, as one step that an
        interrupt cannot split (the C load and the Python copies)."""
        def run() -> None:
            self.ctx.state_set(kv)
            n = len(ids)
            self._ids[:n] = ids
            if self.logits_all:
                self._scores[:n] = scores
            elif n:
                self._scores[0] = scores[-1]
            self._synced = n
            self._stale = False
        atomic(run)

    def adopt(self, ids: np.ndarray, last: np.ndarray) -> None:
        """The core's sequence was decoded outside (lanes.py) to hold ids, with
        `last` the logits after them (logits_all off): take them over."""
        n = len(ids)
        self._ids[:n] = ids
        if n:
            self._scores[0] = last
        self._synced = n
        self._stale = False
