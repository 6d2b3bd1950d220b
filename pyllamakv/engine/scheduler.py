"""Scheduler: the one place that forms a decode step of a context.

Each live sequence (sequence.py) hands it *work*: tokens to append, and how
many of their logits rows it wants (a prefill wants the last one, a decode
its one token, a speculative verification all of them). A step takes up to
n_batch tokens of the queued work, first come first served, a long prompt in
chunks beside the other sequences' tokens, and runs them as one
``decode_batch`` (the weights read once for every sequence in it).
Sequences join and leave between steps.

Whoever waits for work runs steps until its own is done; a thread that finds
a step running waits for it and then takes the next one, so the work that
several threads queue while a step runs goes together into the step after
it (continuous batching). Sequences in a generation are *live* (``join`` /
``leave``): a step waits up to ``gather_s`` for the live sequences that have
not queued their next token yet (their threads are sampling it), so that a
server's slots meet in one step instead of each taking the weights alone. One thread driving several sequences (a prompt
list) queues their work with ``submit`` and the first ``wait`` runs them in
shared steps.

A step of a single-sequence context is a plain ``decode`` (the core's
single-sequence call: the one hybrids, the MTP block and embeddings run
through); with several sequences every step is one ``decode_batch_logits``
(the rows taken in the same call: no other thread's truncate between). A sequence's
logits do not depend on what runs beside it (tests/test_multiseq.py).
A failed step fails every work in it, each sequence back where it was.
"""
from __future__ import annotations

import threading
import time
from typing import Sequence

import numpy as np

from ..errors import ParameterError


class Work:
    """Tokens for sequence `seq`, which holds `start` positions; the logits
    rows of the last `n_rows` of them (0: the core's default, the last one or,
    with logits_all, all)."""

    __slots__ = ("seq", "tokens", "n_rows", "start", "sent", "rows", "done", "error")

    def __init__(self, seq: int, tokens: np.ndarray, n_rows: int, start: int) -> None:
        self.seq, self.tokens, self.n_rows, self.start = seq, tokens, n_rows, start
        self.sent = 0                     # tokens given to a step so far
        self.rows: list[np.ndarray] = []  # per step, the rows it kept
        self.done = False
        self.error: BaseException | None = None

    def wants(self, i: int, logits_all: bool) -> bool:
        """Whether token i's logits row is kept."""
        n = len(self.tokens)
        k = self.n_rows or (n if logits_all else 1)
        return i >= n - k


class Scheduler:
    """Forms and runs the decode steps of one context (see the module)."""

    def __init__(self, ctx, n_batch: int) -> None:
        self.ctx, self.n_batch = ctx, int(n_batch)
        self.logits_all = bool(getattr(ctx, "logits_all", False))
        # hybrids: the conv and delta-rule ops' bits depend on how a sequence's tokens fall
        # into micro-batches, so work of several tokens (a prompt, a verification) runs in
        # a step of its own, split as it would be alone; single tokens share steps
        self.recurrent = bool(getattr(ctx, "recurrent_bytes", 0))
        self._cv = threading.Condition()
        self._queue: list[Work] = []
        self._running = False
        self.steps = 0                    # steps run, and the tokens they carried
        self.step_tokens = 0
        self.multi_steps = 0              # steps that carried several sequences
        self.gather_s = 0.005             # the most a step waits for live sequences' work
        self._live: set[int] = set()
        self.last_alone: int | None = None   # the last step's one sequence (None: several)

    def join(self, seq: int) -> None:
        """seq is generating: steps wait briefly for its work (gather_s)."""
        with self._cv:
            self._live.add(int(seq))

    def leave(self, seq: int) -> None:
        with self._cv:
            self._live.discard(int(seq))
            self._cv.notify_all()

    def submit(self, seq: int, tokens: Sequence[int], n_rows: int, start: int) -> Work:
        """Queues work; nothing runs until someone waits."""
        arr = np.asarray(tokens, dtype=np.int32).reshape(-1)
        if arr.size == 0:
            raise ParameterError("no tokens to decode")
        work = Work(int(seq), arr, int(n_rows), int(start))
        with self._cv:
            self._queue.append(work)
            self._cv.notify_all()
        return work

    def wait(self, work: Work) -> np.ndarray:
        """Runs (or waits for) steps until work is done; its rows, in token order.
        Raises the step's error, the sequence as it was before the work."""
        with self._cv:
            while not work.done:
                if self._running:
                    self._cv.wait()
                    continue
                if self._gather():
                    continue              # a step started (or ended) meanwhile: look again
                self._running = True
                step = self._take()
                self._cv.release()
                try:
                    self._run(step)
                finally:
                    self._cv.acquire()
                    self._running = False
                    self._cv.notify_all()
        if work.error is not None:
            raise work.error
        if not work.rows:
            return np.zeros((0, 0), np.float32)
        return work.rows[0] if len(work.rows) == 1 else np.concatenate(work.rows)

    def run(self, seq: int, tokens: Sequence[int], n_rows: int, start: int) -> np.ndarray:
        return self.wait(self.submit(seq, tokens, n_rows, start))

    def drop(self, work: Work) -> None:
        """Forgets work that no step has started (its sequence leaves)."""
        with self._cv:
            if work in self._queue and work.sent == 0:
                self._queue.remove(work)
                work.done = True

    def _gather(self) -> bool:
        """(Holding the lock) wait up to gather_s while a live sequence has no
        queued work; True if another thread ran a step meanwhile."""
        deadline = None
        while len(self._live) > 1 and not self._live <= {w.seq for w in self._queue}:
            now = time.monotonic()
            deadline = deadline or now + self.gather_s
            if now >= deadline:
                break
            steps = self.steps
            self._cv.wait(deadline - now)
            if self._running or self.steps != steps:
                return True
        return False

    # ------------------------------------------------------------ steps

    def _take(self) -> list[tuple[Work, int, int]]:
        """(work, first, end) pieces of one step, n_batch tokens in all at most;
        one piece per sequence (the core wants each sequence's tokens contiguous)."""
        room, step, seen = self.n_batch, [], set()
        if self.recurrent and self._queue and len(self._queue[0].tokens) > 1:
            w = self._queue[0]
            k = min(room, len(w.tokens) - w.sent)
            w.sent += k
            return [(w, w.sent - k, w.sent)]
        for work in self._queue:
            if room == 0:
                break
            if work.seq in seen or (self.recurrent and len(work.tokens) > 1):
                seen.add(work.seq)        # its earlier work goes first; a hybrid's long work
                continue                  # runs alone (above)
            seen.add(work.seq)
            k = min(room, len(work.tokens) - work.sent)
            step.append((work, work.sent, work.sent + k))
            work.sent += k
            room -= k
        return step

    def _run(self, step: list[tuple[Work, int, int]]) -> None:
        want = [w.wants(i, self.logits_all) for w, a, e in step for i in range(a, e)]
        self.last_alone = None
        try:
            if len(step) == 1 and self.ctx.n_seq_max == 1:
                rows = self._decode_one(step[0], sum(want))
            else:
                toks = np.concatenate([w.tokens[a:e] for w, a, e in step])
                seqs = np.concatenate([np.full(e - a, w.seq, np.int32) for w, a, e in step])
                rows = self.ctx.decode_batch_logits(toks, seqs, want)
        except BaseException as exc:      # every work of the step fails, rolled back
            for w, _, _ in step:
                self._finish(w, exc)
            return
        self.steps += 1
        self.step_tokens += len(want)
        self.last_alone = step[0][0].seq if len(step) == 1 else None
        self.multi_steps += len(step) > 1
        k = 0
        for w, a, e in step:
            n = sum(1 for i in range(a, e) if w.wants(i, self.logits_all))
            if n:
                w.rows.append(rows[k:k + n])
            k += n
            if e == len(w.tokens):
                self._finish(w, None)

    def _decode_one(self, piece: tuple[Work, int, int], n_want: int) -> np.ndarray:
        w, a, e = piece
        part = w.tokens[a:e]
        if n_want == 0:                   # a prompt chunk: the core's default row, unread
            self.ctx.decode(part)
            return np.zeros((0, 0), np.float32)
        default = len(part) if self.logits_all else 1
        self.ctx.decode(part, n_logits=0 if n_want == default else n_want)
        rows = self.ctx.logits()
        return rows[len(rows) - n_want:]

    def _finish(self, work: Work, error: BaseException | None) -> None:
        if error is not None and work.sent > 0:
            try:
                if self.ctx.seq_n_tokens(work.seq) > work.start:
                    self.ctx.seq_truncate(work.seq, work.start)   # its earlier chunks
            except Exception:             # a dead context: the error says enough
                pass
        work.error, work.done = error, True
        with self._cv:
            if work in self._queue:
                self._queue.remove(work)
