"""How many of a drafter's tokens to verify: the draft length that maximizes
expected tokens per second, learned from what verification has cost and what
it has accepted in this process.

A verification pass over n = k + 1 tokens emits 1 + (accepted drafts) tokens.
Its cost depends on the device and on where the KV lies: on a CPU it grows by
about half a step per token; all resident on a GPU it stays near one step up
to 8 tokens and then jumps (the GEMM's fixed cost); with a streamed KV cache
every pass costs about one step, since the PCIe transfer dominates (docs/
performance.md, "Speculative decoding"). A fixed draft length is therefore
too long somewhere and too short elsewhere. DraftLength keeps

- the cost of a pass of n tokens: an exponential average of the measured
  seconds per n. The first pass verifies no draft (a plain step: the base).
  Until a size is measured, 1 + PRIOR_SLOPE (n - 1) times the base (a first
  draft of a few tokens); an n not measured yet is extrapolated from
  below: the largest measured size under it plus the slope of the two
  largest measured sizes under it (flat while only one is), capped by the
  nearest measured size above it; under every measured size, the prior's
  shape scaled to the nearest one. This is optimistic (a longer pass is tried
  once, then known: at most k_max + 1 trials) and does not interpolate across
  a jump (all resident on a GPU, 9 tokens and more) from one expensive trial;
- the acceptance of draft position i given positions 1..i-1 were accepted,
  per match class of the drafter (the n-gram length its draft came from:
  1, 2, 3 or more), as Beta counts whose prior follows prompt lookup's
  measured acceptance (benchmarks/bench_spec_accept.py: drafts from longer
  matches are kept more often);

and chooses k in 0..available maximizing (1 + sum_j prod_{i<=j} a_i) / cost(k + 1).
Only the choice of k changes, never the accept / reject rule (spec_decode.py):
greedy output stays plain greedy's and sampled output keeps the target's
distribution.
"""
from __future__ import annotations

from collections import Counter
from typing import Callable

import numpy as np

EMA = 0.3                      # weight of a new measurement of a pass's cost
PRIOR_SLOPE = 0.25             # cost per extra token, in passes of one token, before any pass
# Beta prior (accepted, rejected) per match class: 1-gram, 2-gram, longer
PRIOR = {1: (1.0, 2.0), 2: (1.5, 1.5), 3: (3.0, 1.0)}


def _cls(match: int | None) -> int:
    return 3 if match is None or match >= 3 else max(1, int(match))


class DraftLength:
    """Chooses the number of drafts per verification pass (module doc).

    cost_of(n, seconds) turns a measured pass into the cost learned for n
    tokens (identity by default; a benchmark may price passes from a table)."""

    def __init__(self, k_max: int, cost_of: Callable[[int, float], float] | None = None):
        if isinstance(k_max, bool) or not isinstance(k_max, (int, np.integer)) or k_max < 1:
            raise ValueError(f"k_max must be an int >= 1, got {k_max!r}")
        self.k_max = int(k_max)
        self.cost_of = cost_of or (lambda n, seconds: seconds)
        self._cost: dict[int, float] = {}
        self._acc = {c: np.full(self.k_max, a) for c, (a, _) in PRIOR.items()}
        self._rej = {c: np.full(self.k_max, r) for c, (_, r) in PRIOR.items()}
        self.k_counts: Counter = Counter()      # passes by the k chosen

    def cost(self, n: int) -> float:
        """The cost of a pass of n tokens as far as known (module doc)."""
        if n in self._cost:
            return self._cost[n]
        if not self._cost:
            return 1.0 + PRIOR_SLOPE * (n - 1)
        if len(self._cost) == 1 and 1 in self._cost:
            return self._cost[1] * (1.0 + PRIOR_SLOPE * (n - 1))
        below = sorted(m for m in self._cost if m < n)
        hi = min((m for m in self._cost if m > n), default=None)
        if not below:   # under every measured size: the prior's shape through the nearest
            return self._cost[hi] * (1.0 + PRIOR_SLOPE * (n - 1)) / (1.0 + PRIOR_SLOPE * (hi - 1))
        lo = below[-1]
        slope = 0.0
        if len(below) >= 2:
            lo2 = below[-2]
            slope = max(0.0, (self._cost[lo] - self._cost[lo2]) / (lo - lo2))
        est = self._cost[lo] + slope * (n - lo)
        return min(est, self._cost[hi]) if hi is not None else est

    def acceptance(self, match: int | None) -> np.ndarray:
        """a_i, i = 1..k_max: draft i kept given 1..i-1 were, for this match class."""
        c = _cls(match)
        return self._acc[c] / (self._acc[c] + self._rej[c])

    def choose(self, available: int, match: int | None = None) -> int:
        """How many of `available` drafts to verify."""
        k_top = min(int(available), self.k_max)
        if k_top <= 0 or 1 not in self._cost:   # first a plain step: the base every cost is against
            return 0
        expected = 1.0 + np.concatenate([[0.0], np.cumsum(np.cumprod(self.acceptance(match)[:k_top]))])
        rate = [expected[k] / self.cost(k + 1) for k in range(k_top + 1)]
        return int(np.argmax(rate))

    def observe(self, k: int, kept: int, seconds: float, match: int | None = None) -> None:
        """A pass verified k drafts in `seconds`, keeping the first `kept`."""
        self.k_counts[k] += 1
        n, c = k + 1, self.cost_of(k + 1, seconds)
        self._cost[n] = c if n not in self._cost else (1 - EMA) * self._cost[n] + EMA * c
        cl = _cls(match)
        tried = min(kept + 1, k)
        self._acc[cl][:kept] += 1.0
        if tried > kept:
            self._rej[cl][kept] += 1.0
