"""Several Llamas over one context: each gets a sequence of a shared
_native.Context (n_seq_max = the number of them), and their decode calls,
made from their own threads, are merged into decode_batch steps.

    shared = SharedContext(4)
    slots = [Llama(path, _model=model, _context=shared.context) for _ in range(4)]

A decode call waits for the next step (the calls that arrive while a step
runs go together into the one after it), so B slots generating at once
decode their B tokens in one step, the weights read once. A long prompt goes
in pieces of n_batch tokens beside the other sequences' tokens. A sequence's
logits are the same bits as on a context of its own (tests/test_multiseq.py),
so results do not depend on what runs beside it.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Sequence

import numpy as np

from ..errors import ContextFullError, ParameterError


class _Request:
    def __init__(self, seq: int, tokens: np.ndarray, n_keep: int, start: int):
        self.seq, self.tokens, self.n_keep, self.start = seq, tokens, n_keep, start
        self.sent = 0
        self.rows: list[np.ndarray] = []
        self.error: BaseException | None = None
        self.done = False


class StepBatcher:
    """Merges the decode calls of several threads (one sequence each) into steps."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self._cv = threading.Condition()
        self._pending: list[_Request] = []
        self._running = False

    def decode(self, seq: int, start: int, tokens: np.ndarray, n_keep: int) -> np.ndarray:
        """Appends tokens to sequence seq, which holds `start` positions; the logits
        of the last n_keep of them. All or nothing for this sequence. (No call on
        the context before the step: its guard would hold this thread back while
        a step runs, and the calls would not meet in one step.)"""
        req = _Request(seq, tokens, n_keep, start)
        with self._cv:
            self._pending.append(req)
            while not req.done:
                if self._running:
                    self._cv.wait()
                    continue
                self._running = True
                step = self._take()
                self._cv.release()
                try:
                    self._run(step)
                finally:
                    self._cv.acquire()
                    self._running = False
                    self._cv.notify_all()
        if req.error is not None:
            raise req.error
        return np.concatenate(req.rows) if req.rows else np.zeros((0, 0), np.float32)

    def _take(self) -> list[tuple[_Request, int, int]]:
        """(request, first, end) pieces for one step: up to n_batch tokens in all."""
        room, step = self.ctx.n_batch, []
        for req in self._pending:
            if room == 0:
                break
            k = min(room, len(req.tokens) - req.sent)
            step.append((req, req.sent, req.sent + k))
            req.sent += k
            room -= k
        return step

    def _run(self, step: list[tuple[_Request, int, int]]) -> None:
        toks, seqs, want = [], [], []
        for req, a, e in step:
            toks.extend(req.tokens[a:e].tolist())
            seqs.extend([req.seq] * (e - a))
            keep_from = len(req.tokens) - req.n_keep
            want.extend(i >= keep_from for i in range(a, e))
        try:
            rows = self.ctx.decode_batch_logits(toks, seqs, want)
        except BaseException as exc:   # every request of the step fails as one, rolled back
            for req, _, _ in step:
                self._finish(req, exc)
            return
        k = 0
        for req, a, e in step:
            n = sum(1 for i in range(a, e) if i >= len(req.tokens) - req.n_keep)
            req.rows.append(rows[k:k + n])
            k += n
            if e == len(req.tokens):
                self._finish(req, None)

    def _finish(self, req: _Request, error: BaseException | None) -> None:
        if error is not None and self.ctx.seq_n_tokens(req.seq) > req.start:
            self.ctx.seq_truncate(req.seq, req.start)   # its earlier pieces
        req.error, req.done = error, True
        with self._cv:
            self._pending.remove(req)


class SeqContext:
    """One sequence of a SharedContext, with the calls Llama makes on a _native.Context."""

    def __init__(self, shared: "SharedContext", seq: int) -> None:
        self._shared, self.seq = shared, seq
        ctx = shared.ctx
        self.n_ubatch, self.out_width, self.logits_all = ctx.n_ubatch, ctx.out_width, ctx.logits_all
        self.n_vocab, self.recurrent_bytes = ctx.n_vocab, 0
        self._n_ctx = shared.n_ctx
        self._n = 0                  # positions this sequence holds (only this view changes it)
        self._rows = np.zeros((0, ctx.out_width), np.float32)
        self._lock = threading.Lock()

    @property
    def n_tokens(self) -> int:
        return self._n

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    def decode(self, tokens: Sequence[int], pos0: int | None = None, n_logits: int = 0) -> None:
        arr = np.asarray(tokens, dtype=np.int64).reshape(-1)
        with self._lock:
            n = self.n_tokens
            if pos0 is not None and pos0 != n:
                raise ParameterError(f"position {pos0} does not follow the cache ({n} positions)")
            if arr.size == 0:
                raise ParameterError("no tokens to decode")
            if arr.min() < 0 or arr.max() >= self.n_vocab:
                raise ParameterError(f"token ids must be in [0, {self.n_vocab})")
            if n + arr.size > self._n_ctx:
                raise ContextFullError(f"{arr.size} tokens at position {n} exceed n_ctx = "
                                       f"{self._n_ctx}")
            if not 0 <= n_logits <= arr.size:
                raise ParameterError(f"n_logits = {n_logits} is outside [0, {arr.size}]")
            keep = n_logits or (arr.size if self.logits_all else 1)
            self._rows = np.zeros((0, self.out_width), np.float32)
            self._rows = self._shared.batcher.decode(self.seq, n, arr.astype(np.int32), keep)
            self._n = n + arr.size

    def logits(self) -> np.ndarray:
        return self._rows.copy()

    def truncate(self, n: int) -> None:
        with self._lock:
            self._shared.ctx.seq_truncate(self.seq, n)
            self._n = int(n)
            self._rows = np.zeros((0, self.out_width), np.float32)

    def reset(self) -> None:
        self.truncate(0)

    def restore_point(self, n: int) -> int:
        return max(0, min(int(n), self.n_tokens))

    def snapshot(self) -> None:
        pass

    def state_get(self) -> bytes:
        return self._shared.ctx.seq_state_get(self.seq)

    def state_set(self, blob: bytes) -> None:
        with self._lock:
            ctx = self._shared.ctx
            ctx.seq_state_set(self.seq, blob)     # checked whole first: a bad blob changes nothing
            self._n = ctx.seq_n_tokens(self.seq)
            self._rows = np.zeros((0, self.out_width), np.float32)

    def kv_stats(self) -> dict[str, Any]:
        d = self._shared.ctx.seq_kv_stats(self.seq)
        d["n_ubatch"] = self.n_ubatch
        return d

    def close(self) -> None:
        self._shared.release(self)

    def __enter__(self) -> "SeqContext":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SharedContext:
    """One context of n_seq sequences; context(model, **Context kwargs) hands out
    the next sequence (the first call makes the context: its pool is n_seq times
    the one asked, so each sequence keeps its share, and its threads n_seq times
    the ones asked, up to the CPU count)."""

    def __init__(self, n_seq: int) -> None:
        if n_seq < 1:
            raise ParameterError(f"n_seq must be >= 1, got {n_seq}")
        self.n_seq = n_seq
        self.ctx = None
        self._lock = threading.Lock()
        self._given = 0
        self._open: set[int] = set()

    def context(self, model, **kw) -> SeqContext:
        from ..core.native import Context
        with self._lock:
            if self.ctx is None:
                if kw.get("kv_pool_bytes") is not None:
                    kw["kv_pool_bytes"] = int(kw["kv_pool_bytes"]) * self.n_seq
                if kw.get("n_threads"):
                    kw["n_threads"] = min(os.cpu_count() or 1, kw["n_threads"] * self.n_seq)
                self.n_ctx = kw.get("n_ctx", 4096)
                self.ctx = Context(model, n_seq_max=self.n_seq, **kw)
                self.ctx.n_batch = min(kw.get("n_batch", 512), self.n_ctx)
                self.batcher = StepBatcher(self.ctx)
            if self._given == self.n_seq:
                raise ParameterError(f"the shared context has {self.n_seq} sequences, all given")
            view = SeqContext(self, self._given)
            self._open.add(self._given)
            self._given += 1
            return view

    def release(self, view: SeqContext) -> None:
        with self._lock:
            if view.seq not in self._open:
                return
            self._open.discard(view.seq)
            if not self._open and self.ctx is not None:
                self.ctx.close()
