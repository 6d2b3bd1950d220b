"""Greedy generation in the core: a generation's decode steps without a
Python round trip per token (core/native_gen.py, llamakv.h lkv_generate).

Used by ``token_stream`` (api/decoding.py) when nothing changes the logits in Python: a greedy
sampler (temperature <= 0) without penalties, grammar or logits processors,
no stopping_criteria, no logits_all, no draft model. logit_bias is applied in
the core, in float64 as the Python sampler does, so the ids are the ones the
Python path picks, bit for bit. The core returns blocks of tokens (1, 2, 4 ..
64, at most what ``limit`` leaves and what takes about BLOCK_S, so that a stream
still gets its tokens in small bursts), stopping at the end ids; the cache then
holds every returned token but the last. A consumer that stops inside a block
(a stop string) gets the cache cut back to what the Python loop would have
decoded, its last token decoded again for its logits (Sequence.truncate: for
hybrids a replay from the latest snapshot, so hybrids take blocks of one token,
which never overshoot); so does a cancel (Sequence.cancel) between two tokens.
The loop is the core's for sequence 0 of a single-sequence context
(``Sequence.solo``); the sequences of a shared engine decode through its
scheduler instead.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterator, Sequence

from ..core.native_gen import has_generate
from ..errors import ClosedError
from .sampling import Sampler

if TYPE_CHECKING:
    from .sequence import Sequence as Seq
    from .state import Timings

MAX_BLOCK = 64
BLOCK_S = 0.05   # a block takes about this long at most: a stream's tokens come at least this often


def loop_ok(seq: "Seq", sampler: Sampler, stopping_criteria=None, logits_all: bool = False,
            drafting: bool = False, in_core: bool = True) -> bool:
    """Whether the core's greedy loop gives what the Python loop would on seq
    (logits_all: every row's logits kept; drafting: a drafter's guesses verified;
    in_core False: the Python loop asked for)."""
    p = sampler.params
    penalties = p.repeat_last_n != 0 and (p.repeat_penalty != 1.0 or p.presence_penalty != 0.0
                                          or p.frequency_penalty != 0.0)
    return (p.temperature <= 0 and not penalties and sampler.constraint is None
            and not sampler.processors and stopping_criteria is None
            and not logits_all and not drafting and seq.solo and in_core and has_generate())


def greedy_tokens(hist: "Seq", sampler: Sampler, timings: "Timings", limit: int | None = None,
                  ends: Sequence[int] | None = None) -> Iterator[int]:
    """Token ids of sequence hist as token_stream yields them (its decodes counted
    in timings), from the core's loop; returns
    (without a token) when the logits hold a NaN or no finite value, so that
    the caller's Python sampler reports it. ends None: one token per call, so
    that between two tokens the logits and the cache are the Python loop's (a
    consumer may read them); given (completion_pieces, which reads neither):
    blocks, ending at those ids or after limit tokens."""
    grow = ends is not None and not hist.recurrent
    ends = sorted({int(t) for t in ends or ()})
    bias = sampler.params.logit_bias
    pending, block, left = -1, 1, limit
    while True:
        n_max = block if grow else 1
        if left is not None:
            n_max = max(1, min(n_max, left))
        n0 = hist.n
        t0 = time.perf_counter()
        ids = hist.greedy(n_max, pending, ends, bias)
        base = n0 + (pending >= 0)
        dt, stepped = time.perf_counter() - t0, hist.n - n0
        timings.add("decode", dt, stepped)
        if len(ids) == 0:
            return
        for i, t in enumerate(ids.tolist()):
            if hist.cancelled:
                _cut(hist, base + i)
                return
            try:
                yield t
            except GeneratorExit:   # stopped inside the block
                try:
                    _cut(hist, base + i)
                except ClosedError:   # the context closed first: no cache left to cut
                    pass
                raise
        pending = int(ids[-1])
        if left is not None:
            left -= len(ids)
        fit = int(BLOCK_S * stepped / dt) if stepped and dt > 0 else MAX_BLOCK
        block = max(1, min(2 * block, MAX_BLOCK, fit))


def _cut(seq, keep: int) -> None:
    """The cache (and its last logits) as the Python loop leaves it when the
    generation ends before the token at position keep: decoded up to the one before."""
    if seq.n > keep:
        last = int(seq.prefix(keep)[-1])
        seq.truncate(keep - 1)
        seq.eval([last])
