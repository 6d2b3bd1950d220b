"""The core's sampler chain for a Python Sampler: which samplers it serves, and
their parameters, penalty history and random state across the core's calls
(llamakv.h lkv_generate's sampler fields; greedy_loop.py runs the loop).

The core's chain is sampling.py's without its Python hooks, pick for pick the
same ids for the same seed (native/src/sample_chain.h: the same float64
operations, candidate order and PCG64 draws). A Sampler needs no hook when it
has no grammar and no logits processors, and, sampling at temperature > 0, no
mirostat (whose state stays in Python; greedy ignores it). Its numpy generator goes
to the core as four words and comes back advanced by the draws made; a
consumer that stops inside a block gets the state after the draws the Python
loop would have made by then (``rewind``).
"""
from __future__ import annotations

import numpy as np

from .sampling import Sampler

MASK = (1 << 64) - 1
PCG_MUL = 0x2360ED051FC65DA44385DF649FCCF645   # numpy's PCG64 multiplier (128-bit LCG)


def core_ok(sampler: Sampler) -> bool:
    """Whether the core's chain picks what sampler.sample would."""
    p = sampler.params
    hooks = sampler.constraint is not None or bool(sampler.processors)
    return not hooks and (p.temperature <= 0 or sampler.mirostat is None)


def _words(rng: np.random.Generator) -> np.ndarray:
    st = rng.bit_generator.state
    if st.get("bit_generator") != "PCG64":
        raise TypeError(f"the core's chain draws as numpy's PCG64, not {st.get('bit_generator')}")
    s, inc = st["state"]["state"], st["state"]["inc"]
    return np.array([s >> 64, s & MASK, inc >> 64, inc & MASK], np.uint64)


def _set_words(rng: np.random.Generator, w: np.ndarray, steps: int = 0) -> None:
    s, inc = (int(w[0]) << 64) | int(w[1]), (int(w[2]) << 64) | int(w[3])
    for _ in range(steps):
        s = (s * PCG_MUL + inc) & ((1 << 128) - 1)
    st = rng.bit_generator.state
    st["state"] = {"state": s, "inc": inc}
    rng.bit_generator.state = st


class CoreChain:
    """One generation's calls of the core's chain for sampler."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler
        p = sampler.params
        self.fields = {"temperature": p.temperature, "top_k": p.top_k, "top_p": p.top_p,
                       "min_p": p.min_p, "typical_p": p.typical_p, "repeat_penalty": p.repeat_penalty,
                       "frequency_penalty": p.frequency_penalty,
                       "presence_penalty": p.presence_penalty, "repeat_last_n": p.repeat_last_n}
        self.draws = p.temperature > 0
        self.penalties = p.repeat_last_n != 0 and (
            p.repeat_penalty != 1.0 or p.presence_penalty != 0.0 or p.frequency_penalty != 0.0)
        self._before: np.ndarray | None = None   # the generator's words before the last call
        self._drawn = np.zeros(0, np.uint8)

    @property
    def needed(self) -> bool:
        """False for the plain greedy pick (bias only), which needs none of this."""
        return self.draws or self.penalties

    def args(self, ids: np.ndarray, pending: int, n_max: int) -> dict | None:
        """The chain's fields for a call whose first pick sees the cache's ids and
        pending (the token the call decodes first; -1: none)."""
        if not self.needed:
            return None
        s = self.sampler
        a = dict(self.fields)
        n = len(ids) + (pending >= 0)   # the history's length at the first pick
        start = 0
        if s.generated_only:   # as Sampler.candidates: the first pick's history is the prompt
            if s.prompt_len is None:
                s.prompt_len = n
            start = s.prompt_len
        if self.penalties:   # the window Sampler._penalize would take: history[start:][-n:]
            last = self.fields["repeat_last_n"]
            lo = start if last < 0 else max(start, n - last)
            tail = np.asarray(ids[lo:], np.int32)
            a["history"] = np.append(tail, np.int32(pending)) if pending >= 0 and lo < n else tail
        if self.draws:
            self._before = _words(s.rng)
            self._drawn = np.zeros(max(n_max, 1), np.uint8)
            a["rng"], a["drawn"] = self._before.copy(), self._drawn
        return a

    def done(self, a: dict | None) -> None:
        """After a call (also a failed one): the generator advanced by its draws."""
        if a is not None and self.draws:
            _set_words(self.sampler.rng, a["rng"])

    def rewind(self, k: int) -> None:
        """The generator as after the last call's first k picks only."""
        if self.draws and self._before is not None:
            _set_words(self.sampler.rng, self._before, int(self._drawn[:k].sum()))
