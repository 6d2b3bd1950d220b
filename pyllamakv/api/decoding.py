"""A generation on one Sequence: prompt ids -> sampled ids, in three named stages.

    d = Decoding(drafter=None, logits_all=False)
    for token in token_stream(seq, prompt, sampler, d): ...

``prefill`` (a token list, in n_batch slices), ``decode_one`` (one sampled
token) and ``sample`` (logits -> id), or the core's loop where the sampler
needs no Python hook (engine/greedy_loop.py), or a drafter's guesses verified
(spec/verify.py).
Everything a generation needs beside the sequence and its sampler is a
``Decoding``: the drafter, whether the sequence keeps every row's logits, a
progress callback, whether its decodes wait for a step other sequences share
(a prompt list's), and the Timings it fills. ``Llama.token_stream`` passes its
own sequence and settings; a server slot passes its slot's sequence.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence as Seq

from ..engine.greedy_loop import greedy_tokens, loop_ok
from ..engine.processors import stop_asked
from ..engine.sampling import Sampler
from ..engine.sequence import Sequence
from ..engine.state import Timings
from ..errors import ParameterError
from ..spec.mtp import uses_mtp
from ..spec.verify import speculative_tokens


@dataclass(slots=True)
class Decoding:
    """What a generation on a sequence needs beside it and its sampler."""
    drafter: Any = None               # spec/drafters.py; None: plain decoding
    logits_all: bool = False          # the sequence keeps every row (no speculation, no loop)
    progress: Callable | None = None  # progress("prefill", done, total) (progress.py)
    defer: bool = False               # a sampled token's decode waits for a shared step
    greedy_in_core: bool = True       # the core's loop where it gives the same ids
    timings: Timings = field(default_factory=Timings)


def prefill(seq: Sequence, tokens: Seq[int], d: Decoding, stage: str = "prefill") -> None:
    t0 = time.perf_counter()
    seq.eval(tokens, d.progress if stage == "prefill" else None)
    d.timings.add(stage, time.perf_counter() - t0, len(tokens))


def decode_one(seq: Sequence, token: int, d: Decoding) -> None:
    prefill(seq, [token], d, "decode")


def sample(seq: Sequence, sampler: Sampler, d: Decoding) -> int:
    t0 = time.perf_counter()
    token = sampler.sample(seq.last_logits(), seq.input_ids())
    d.timings.sample_s += time.perf_counter() - t0
    return token


def token_stream(seq: Sequence, tokens: list[int], sampler: Sampler, d: Decoding,
                 reset: bool = True, stopping_criteria=None, limit: int | None = None,
                 ends=None) -> Iterator[int]:
    """Sampled ids after tokens, without end; the caller stops. reset: keep the
    longest cached prefix of tokens and evaluate the rest (at least the last
    token); else append tokens to what seq holds. ends (with limit): the
    greedy loop may run ahead in blocks (completion.py, which reads no logits)."""
    if getattr(seq.ctx, "embeddings", False):
        raise RuntimeError("the sequence is an embedding context's (embedding=True): it "
                           "computes embeddings (embed, create_embedding), not logits")
    seq.uncancel()   # Sequence.cancel ends the generation running then
    # a grammar, mirostat or logits processors keep state per sampled token, which
    # verification does not advance: plain decoding then (a hybrid drops rejected
    # rows by a snapshot and a replay: sequence.py)
    drafter = d.drafter if (not d.logits_all and sampler.constraint is None
                            and sampler.mirostat is None and not sampler.processors) else None
    if getattr(seq.ctx, "mtp", False):
        # only a generation that drafts with it pays for the MTP block; switched on
        # behind, keep_prefix's restore point is one where it is in sync (spec/mtp.py)
        seq.ctx.set_mtp(uses_mtp(drafter), seq=seq.id)
    if reset:
        if not tokens:
            raise ParameterError("generate needs at least one token")
        tokens = seq.keep_prefix(tokens)
    if not tokens and seq.n == 0:
        raise ParameterError("generate needs at least one token")
    if seq.recurrent and len(tokens) > 1:
        # hybrids: a snapshot before the prompt's last token, where the next
        # prompt sharing this one (or this one again) can start
        prefill(seq, tokens[:-1], d)
        seq.snapshot()
        tokens = tokens[-1:]
    prefill(seq, tokens, d)
    if drafter is not None:
        yield from speculative_tokens(seq, sampler, drafter, d.timings)
    elif loop_ok(seq, sampler, stopping_criteria, logits_all=d.logits_all, in_core=d.greedy_in_core):
        # returns on NaN / -inf logits only; ends given: run ahead
        yield from greedy_tokens(seq, sampler, d.timings, limit, ends)
    try:
        seq.scheduler.join(seq.id)   # live: steps wait briefly for its tokens
        while not seq.cancelled:     # cancel(): ends before the next token
            token = sample(seq, sampler, d)
            if stopping_criteria is not None and stop_asked(stopping_criteria, seq):
                return
            if d.defer:     # queued before it is yielded: the next step, any
                seq.submit([token])   # sequence's, decodes it (prompt_list.py)
                yield token
            else:
                yield token
                decode_one(seq, token, d)
    finally:
        seq.scheduler.leave(seq.id)
        if d.defer:
            seq.drop_pending()
