"""Speculative decoding: verify a drafter's k guesses in one target pass.

The cache holds the context up to the last sampled token t, which is not yet
decoded. The drafter proposes d1..dk after it; the target decodes
[t, d1..dk] in one call keeping the logits of all k + 1 rows, row i being the
distribution p_i of the token after d_i (d_0 = t). Then, for i = 1..k:

    accept d_i with probability min(1, p_{i-1}(d_i) / q(d_i))

where q is the drafter's distribution; drafts here are deterministic (q a
point mass, q(d_i) = 1), so d_i is kept with probability p_{i-1}(d_i). At the
first rejection the replacement is drawn from max(p_{i-1} - q, 0) normalized
(p_{i-1} without d_i), the rows after it are truncated from the cache, and the
round ends; when every draft is kept, the next token is drawn from p_k. Each
emitted token is then distributed exactly as plain sampling would draw it
(Leviathan et al. 2023, "Fast inference from transformers via speculative
decoding"). p is the Sampler's own chain (penalties, bias, top_k/top_p/min_p,
temperature), computed with the history up to that row; with temperature <= 0
p is a point mass on the arg-max, so greedy output is that of plain greedy.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterator

import numpy as np

from ..errors import ParameterTypeError

from ..engine.sampling import Sampler

if TYPE_CHECKING:
    from ..engine.sequence import Sequence
    from ..engine.state import Timings
    from .drafters import Drafter


def _draw(rng: np.random.Generator, ids: np.ndarray, probs: np.ndarray) -> int:
    if ids.size == 1:
        return int(ids[0])
    cdf = np.cumsum(probs)
    i = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    return int(ids[min(i, ids.size - 1)])


def accept_draft(sampler: Sampler, logits: np.ndarray, history: np.ndarray,
                 draft: int) -> tuple[bool, int]:
    """One step of the rule for a point-mass draft: (kept, token). token is
    the draft when kept, else a draw from p without the draft."""
    ids, probs = sampler.candidates(logits, history)
    rng = sampler.rng
    hit = ids == draft
    p_draft = float(probs[hit].sum())
    if p_draft > 0.0 and (p_draft >= 1.0 or rng.random() < p_draft):
        return True, draft
    rest = np.where(hit, 0.0, probs)
    return False, _draw(rng, ids, rest)


def _clean(drafts, n_vocab: int, k_max: int) -> list[int]:
    """The drafter's ids as ints, cut at k_max and at the first invalid one;
    ParameterTypeError if they are not integers (strings, floats, objects)."""
    arr = np.asarray(drafts if drafts is not None else [])
    if arr.size and arr.dtype.kind not in "iu":
        raise ParameterTypeError(f"draft_model returned {arr.dtype} values "
                                 f"({str(arr.reshape(-1)[:3].tolist())[:60]}); a drafter must "
                                 "return token ids (integers)")
    out = []
    for d in arr.astype(np.int64).reshape(-1)[:k_max]:
        if not 0 <= d < n_vocab:
            break
        out.append(int(d))
    return out


def verify(seq: "Sequence", tokens: list[int]) -> np.ndarray:
    """Decode tokens after seq's cache in one pass; their logits, (len, n_vocab)."""
    return seq.eval_rows(tokens)


def speculative_tokens(seq: "Sequence", sampler: Sampler, drafter: "Drafter",
                       tm: "Timings") -> Iterator[int]:
    """Like the plain loop of token_stream (api/decoding.py) after the prefill:
    sampled ids of sequence seq, without end, several per target pass when
    drafts are kept (counted in tm). As there, the cache holds every token
    before the one last yielded (when the consumer stops amid kept drafts, the
    rest are truncated)."""
    n_vocab = seq.ctx.n_vocab
    length = getattr(drafter, "length", None)   # spec_length.DraftLength: how many drafts pay
    hist = seq
    t0 = time.perf_counter()
    token = sampler.sample(seq.last_logits(), seq.input_ids())
    tm.sample_s += time.perf_counter() - t0
    while True:
        yield token
        t0 = time.perf_counter()
        room = min(seq.n_ctx - hist.n - 1, seq.n_batch - 1)
        history = np.append(hist.input_ids(), np.int32(token))
        drafts = _clean(drafter(history), n_vocab, room) if room > 0 else []
        match = getattr(drafter, "last_match", None)
        if length is not None:
            k = length.choose(len(drafts), match)
            drafts = drafts[:k if k >= getattr(drafter, "n_min", 0) else 0]
        t1 = time.perf_counter()
        if drafts:
            hist.snapshot()   # hybrids: where truncate_to_row replays from
        rows = verify(seq, [token] + drafts)
        t2 = time.perf_counter()
        n_base = hist.n - len(drafts)            # cache length with token, no drafts
        kept, nxt = 0, None
        for i, d in enumerate(drafts):
            ok, t = accept_draft(sampler, rows[i], hist.prefix(n_base + i), d)
            if not ok:
                nxt = t
                break
            kept += 1
        if nxt is None:
            nxt = sampler.sample(rows[len(drafts)], hist.prefix(n_base + kept))
        if kept < len(drafts):
            hist.truncate_to_row(n_base + kept, rows[kept])
        if length is not None:
            length.observe(len(drafts), kept, t2 - t1, match)
        t3 = time.perf_counter()
        tm.draft_s += t1 - t0
        tm.decode_s += t2 - t1
        tm.sample_s += t3 - t2
        tm.decode_tokens += 1 + kept
        tm.verify_passes += 1
        tm.drafted_tokens += len(drafts)
        tm.accepted_tokens += kept
        for j, d in enumerate(drafts[:kept]):
            try:
                yield d
            except GeneratorExit:   # leave the cache as the plain loop would: all before d
                hist.truncate_to_row(n_base + j, rows[j])
                raise
        token = nxt
