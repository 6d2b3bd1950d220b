"""Sequence: one sequence of an engine's context, the tokens it holds and the
logits kept for them.

The C context is the authority: ``n`` is the core's count for this sequence,
read from it, never counted separately in Python. ``input_ids`` is written
before a decode (the rows past ``n`` are invisible until the core takes them)
and the logits a decode returns are copied by ``sync``, which every reader
calls first. The decodes themselves go through the engine's scheduler
(scheduler.py), which batches them with the other sequences' work. When
this sequence's decode was the context's last (one sequence at a time, the
Llama's own case), ``sync`` also recovers rows that an interrupt kept from
being copied; a decode is all or nothing in the core, also when aborted.

Hybrids (recurrent layers) cannot cut their state back: ``truncate`` goes
back to the latest snapshot (``snapshot``) before the target and decodes the
tokens between again. The longest-common-prefix rule (``common_prefix``)
lives here, once.
"""
from __future__ import annotations

import threading
from typing import Any, Sequence as Seq

import numpy as np

from ..errors import ContextFullError, ParameterError
from .guard import atomic
from .scheduler import Scheduler, Work


def common_prefix(a: Seq[int], b: Seq[int]) -> int:
    """How many leading tokens a and b share (the one rule for reusing a cache)."""
    n = min(len(a), len(b))
    diff = np.nonzero(np.asarray(a[:n], np.int64) != np.asarray(b[:n], np.int64))[0]
    return int(diff[0]) if diff.size else n


class Sequence:
    """Sequence `id` of `ctx`, decoding through `scheduler` (see the module).
    keep_all: logits of every position (logits_all); else the last one only."""

    def __init__(self, ctx, scheduler: Scheduler, seq_id: int, n_ctx: int, n_batch: int,
                 keep_all: bool = False) -> None:
        self.ctx, self.scheduler, self.id = ctx, scheduler, int(seq_id)
        self.n_ctx, self.n_batch, self.keep_all = n_ctx, n_batch, bool(keep_all)
        # the core's whole-context calls are sequence 0's: a single-sequence context's
        # sequence (hybrids, MTP, embeddings) uses them, with their snapshots
        self._own_ctx = self.id == 0 and getattr(ctx, "n_seq_max", 1) == 1
        self._ids = np.zeros(n_ctx, np.int32)                                   # (n_ctx,)
        self._scores = np.zeros((n_ctx if keep_all else 1, ctx.out_width), np.float32)
        self._synced = 0                  # positions whose logits are in _scores
        self._stale = False               # the core's greedy loop decoded since: copy on read
        self._pending: Work | None = None  # queued by submit, not waited for yet
        self._cancelled = threading.Event()

    # ------------------------------------------------------------ reading

    @property
    def n(self) -> int:
        """Positions the core holds for this sequence."""
        return self.sync()

    def _core_n(self) -> int:
        return self.ctx.n_tokens if self._own_ctx else self.ctx.seq_n_tokens(self.id)

    def sync(self) -> int:
        """Finishes queued work, brings the scores up to the core's count; that count."""
        if self._pending is not None:
            work, self._pending = self._pending, None
            self._take(work.start, len(work.tokens), self.scheduler.wait(work))
        n = self._core_n()
        if n > self._synced and self.scheduler.last_alone == self.id:
            rows = self.ctx.logits()      # an interrupted copy: the core still has the rows
            if self.keep_all:
                self._scores[n - len(rows):n] = rows
            elif len(rows):
                self._scores[0] = rows[-1]
            self._stale = False
        self._synced = n
        return n

    def _fresh(self) -> None:
        """The last logits copied, if the core's greedy loop left them there."""
        if self._stale:
            rows = self.ctx.logits()
            if len(rows):
                self._scores[0] = rows[-1]
            self._stale = False

    def input_ids(self) -> np.ndarray:
        return self._ids[:self.sync()]

    def scores(self) -> np.ndarray:
        """(n, width) with keep_all; else (1, width): the last position's."""
        n = self.sync()
        self._fresh()
        return self._scores[:n] if self.keep_all else self._scores

    def last_logits(self) -> np.ndarray:
        n = self.sync()
        self._fresh()
        return self._scores[n - 1 if self.keep_all else 0]

    def prefix(self, n: int) -> np.ndarray:
        """The first n ids written (n may pass the core's count within a verification)."""
        return self._ids[:n]

    # ------------------------------------------------------------ decoding

    def _take(self, start: int, k: int, rows: np.ndarray) -> None:
        """The rows a decode of k tokens after start returned: the last ones kept."""
        n = start + k
        self._stale = False
        if len(rows):
            if self.keep_all:
                self._scores[n - len(rows):n] = rows
            else:
                self._scores[0] = rows[-1]
        self._synced = n

    def _check_room(self, n: int, tokens) -> None:
        """Bad ids or too many tokens: an error naming them, before anything runs."""
        k = len(tokens)
        if k and (min(tokens) < 0 or max(tokens) >= self.ctx.n_vocab):
            raise ParameterError(f"token ids must be in [0, {self.ctx.n_vocab}); got "
                                 f"{min(tokens) if min(tokens) < 0 else max(tokens)}")
        if n + k > self.n_ctx:
            raise ContextFullError(f"{n} cached + {k} new tokens exceed the context "
                                   f"window (n_ctx={self.n_ctx})")

    def eval(self, tokens: Seq[int], progress=None) -> None:
        """Decode tokens in n_batch slices; progress("prefill", done, total)
        (progress.py) after each when there is more than one."""
        n = self.sync()
        self._check_room(n, tokens)
        report = progress is not None and len(tokens) > self.n_batch
        if report:
            progress("prefill", 0, len(tokens))
        for i in range(0, len(tokens), self.n_batch):
            part = tokens[i:i + self.n_batch]
            self._ids[n:n + len(part)] = part
            self._take(n, len(part), self.scheduler.run(self.id, part, 0, n))
            n = self.sync()
            if report:
                progress("prefill", i + len(part), len(tokens))

    def submit(self, tokens: Seq[int]) -> None:
        """Queue tokens without waiting: the next reader of this sequence (or a
        step any other sequence runs first) decodes them, beside the others' work."""
        n = self.sync()
        self._check_room(n, tokens)
        self._ids[n:n + len(tokens)] = tokens
        self._pending = self.scheduler.submit(self.id, tokens, 0, n)

    def drop_pending(self) -> None:
        """Forget queued tokens no step has taken (what a generation that ended
        early left); taken ones are waited for."""
        if self._pending is not None and self._pending.sent == 0:
            self.scheduler.drop(self._pending)
            self._pending = None
        self.sync()

    def eval_rows(self, tokens: Seq[int]) -> np.ndarray:
        """Decode tokens in one pass; the logits of every one of them, (len, width):
        a speculative verification."""
        n = self.sync()
        self._check_room(n, tokens)
        if len(tokens) > self.n_batch:
            raise ContextFullError(f"{len(tokens)} tokens after {n} exceed the context "
                                   f"(n_ctx={self.n_ctx}) or a batch (n_batch={self.n_batch})")
        self._ids[n:n + len(tokens)] = tokens
        rows = self.scheduler.run(self.id, tokens, len(tokens), n)
        self._take(n, len(tokens), rows)
        return rows

    @property
    def solo(self) -> bool:
        """The one sequence of its context: the core's whole-context calls (its
        greedy loop, greedy_loop.py) are this sequence's."""
        return self._own_ctx

    def greedy(self, n_max: int, pending: int, ends, bias, chain=None) -> np.ndarray:
        """The core's loop (a solo sequence; Context.generate; chain: its sampler
        fields, greedy without): pending (if >= 0) decoded, then up to n_max ids
        picked, all but the last decoded; their logits are copied when read. A
        failure keeps the ids made in .partial."""
        n0 = self.sync()
        try:
            ids = self.ctx.generate(n_max, pending, ends, bias, chain)
        except BaseException as e:
            self._generated(n0, pending, getattr(e, "partial", ()))
            raise
        self._generated(n0, pending, ids)
        return ids

    def _generated(self, n0: int, pending: int, ids) -> None:
        seq = ([pending] if pending >= 0 else []) + [int(t) for t in ids]
        self._ids[n0:n0 + len(seq)] = seq[:self.n_ctx - n0]
        n = self._core_n()
        if n > n0:
            self._stale = True
        self._synced = n

    # ------------------------------------------------------------ going back

    @property
    def recurrent(self) -> bool:
        """A hybrid's sequence: recurrent state that truncate cannot cut back."""
        return bool(self.ctx.recurrent_bytes)

    def restore_point(self, n: int) -> int:
        """The largest position <= n that truncate reaches without a replay."""
        if self._own_ctx:
            return self.ctx.restore_point(n)
        return self.ctx.seq_restore_point(self.id, max(0, int(n)))

    def snapshot(self) -> None:
        """Hybrids: keep the recurrent state here so a later truncate can return to it."""
        if self.recurrent:
            if self._own_ctx:
                self.ctx.snapshot()
            else:
                self.ctx.seq_snapshot(self.id)

    def _cut(self, n: int) -> None:
        if self._own_ctx:
            self.ctx.truncate(n)
        else:
            self.ctx.seq_truncate(self.id, n)

    def truncate(self, n: int) -> None:
        """To n positions; a hybrid whose recurrent state cannot return to n goes
        back to the latest snapshot before it and decodes the tokens between again."""
        self.sync()
        self._fresh()
        back = self.restore_point(n) if n < self._core_n() else n
        self._cut(back)
        for i in range(back, n, self.n_batch):
            part = self._ids[i:min(n, i + self.n_batch)]
            self.scheduler.run(self.id, part, 0, i)
        self.sync()

    def truncate_to_row(self, n: int, logits: np.ndarray) -> None:
        """Truncate to n positions whose last logits are `logits` (a row a
        verification returned), as one step an interrupt cannot split."""
        def run() -> None:
            self.truncate(n)
            if not self.keep_all:
                self._scores[0] = logits
        atomic(run)

    def keep_prefix(self, tokens: list[int]) -> list[int]:
        """Keep the longest cached prefix of tokens (all but the last token at
        most, for its logits); returns the tokens still to evaluate."""
        keep = min(common_prefix(self.input_ids(), tokens), len(tokens) - 1)
        keep = self.restore_point(keep)   # hybrids: the latest snapshot at or before
        self.truncate(keep)
        return tokens[keep:]

    def reset(self) -> None:
        self.drop_pending()
        self.truncate(0)

    # ------------------------------------------------------------ state

    def state_get(self) -> bytes:
        """The core's state of this sequence (a blob any sequence of a context of
        the same model and geometry loads)."""
        self.sync()
        return self.ctx.state_get() if self._own_ctx else self.ctx.seq_state_get(self.id)

    def restore(self, kv: bytes | memoryview, ids: np.ndarray, scores: np.ndarray) -> None:
        """Replace everything with a checked state, as one step that an
        interrupt cannot split (the C load and the Python copies)."""
        self.drop_pending()

        def run() -> None:
            if self._own_ctx:
                self.ctx.state_set(kv)
            else:
                self.ctx.seq_state_set(self.id, kv)
            n = len(ids)
            self._ids[:n] = ids
            if self.keep_all:
                self._scores[:n] = scores
            elif n:
                self._scores[0] = scores[-1]
            self._synced = n
            self._stale = False
        atomic(run)

    def kv_stats(self) -> dict[str, Any]:
        """This sequence's KV residency and streaming counters."""
        d = self.ctx.seq_kv_stats(self.id)
        d["n_ubatch"] = self.ctx.n_ubatch
        return d

    # ------------------------------------------------------------ cancel

    def cancel(self) -> None:
        """Ask the generation running on this sequence to end before its next token
        (from any thread); it ends as if finished, what it decoded kept."""
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def uncancel(self) -> None:
        """Clear the request (a new generation begins)."""
        self._cancelled.clear()
