"""A batch of (seq, token, want_logits) for one decode step over several
sequences of one context (continuous batching).

    ctx = _native.Context(model, n_ctx=2048, n_seq_max=4, kv_pool_bytes=...)
    b = Batch()
    b.add(0, tok_a, True)            # sequence 0's next token
    for t in prompt_b: b.add(1, t)   # sequence 1's prompt ...
    b.mark_last(1)                   # ... with the logits of its last token
    rows = b.decode(ctx)             # rows[i]: item i's logits, or None

Items of one sequence keep their order; the core needs each sequence's tokens
contiguous, so decode() groups them (by first appearance) and maps the logits
rows back to the items.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ParameterError


@dataclass(frozen=True)
class BatchItem:
    seq: int
    token: int
    want_logits: bool = False


class Batch:
    def __init__(self) -> None:
        self.items: list[BatchItem] = []

    def __len__(self) -> int:
        return len(self.items)

    def add(self, seq: int, token: int, want_logits: bool = False) -> int:
        """Appends one token of sequence seq; returns its index in the batch."""
        self.items.append(BatchItem(int(seq), int(token), bool(want_logits)))
        return len(self.items) - 1

    def mark_last(self, seq: int) -> None:
        """Asks for the logits of sequence seq's last item so far."""
        for i in range(len(self.items) - 1, -1, -1):
            if self.items[i].seq == seq:
                self.items[i] = BatchItem(seq, self.items[i].token, True)
                return
        raise ParameterError(f"the batch has no token of sequence {seq}")

    def clear(self) -> None:
        self.items.clear()

    def order(self) -> list[int]:
        """Item indices grouped by sequence (first appearance), each in its order."""
        groups: dict[int, list[int]] = {}
        for i, it in enumerate(self.items):
            groups.setdefault(it.seq, []).append(i)
        return [i for idx in groups.values() for i in idx]

    def decode(self, ctx) -> list[np.ndarray | None]:
        """Runs the batch on ctx (a _native.Context); per item its logits row (a
        copy) where it asked for one, else None. All or nothing."""
        if not self.items:
            raise ParameterError("the batch is empty")
        order = self.order()
        items = [self.items[i] for i in order]
        want = [it.want_logits for it in items]
        ctx.decode_batch([it.token for it in items], [it.seq for it in items], want)
        rows = ctx.logits()
        out: list[np.ndarray | None] = [None] * len(self.items)
        k = 0
        for i, w in zip(order, want):
            if w:
                out[i] = rows[k]
                k += 1
        return out
