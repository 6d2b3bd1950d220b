"""Sampling: next-token choice from a logits vector, as llama.cpp's chain does it.

The chain, in the order llama-cpp-python builds it:

    penalties -> logit bias -> top_k -> typical_p -> top_p -> min_p -> temperature -> draw

with temperature <= 0 meaning greedy (arg-max after penalties and bias). Each
filter looks at the probabilities of the candidates the previous one kept.
The random draw uses numpy's PCG64, not llama.cpp's mt19937, so the same seed
gives a reproducible sequence here but not llama.cpp's sequence. The draw maps
onto the candidates' cdf in their order, which depends on their values only
(largest first after top_k / top_p, ties by the lower id; all ids in order
otherwise); the core's chain (native/src/sample_chain.c, engine/core_chain.py)
does the same float64 steps in the same order, so a generation sampled inside
the core gives these ids for the same seed.

Everything works on (n_vocab,) float arrays with numpy; the filters shrink the
candidate set early (argpartition for top_k, a partial sort for top_p) so a
150K vocab costs about one pass over the logits.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..checks import check_int, check_real, is_int as _is_int, is_real as _is_real
from ..errors import InvalidArgumentError, ParameterError, ParameterTypeError

from .mirostat import Mirostat


@dataclass(slots=True)
class SamplingParams:
    temperature: float = 0.8          # <= 0: greedy
    top_k: int = 40                   # 0 or negative: off (llama.cpp reads -1 so)
    top_p: float = 0.95               # 1.0: off
    min_p: float = 0.05               # 0.0: off
    typical_p: float = 1.0            # 1.0: off
    repeat_penalty: float = 1.0       # 1.0: off
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repeat_last_n: int = 64           # 0: off, -1: the whole history
    logit_bias: dict[int, float] = field(default_factory=dict)
    seed: int | None = None           # None or -1: random
    mirostat_mode: int = 0            # 0: off, 1 or 2: mirostat (mirostat.py) replaces the filters
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1

    def __post_init__(self) -> None:
        for name in ("temperature", "presence_penalty", "frequency_penalty"):
            check_real(f"SamplingParams.{name}", getattr(self, name))
        for name in ("top_p", "min_p", "typical_p"):
            check_real(f"SamplingParams.{name}", getattr(self, name), 0.0, 1.0)
        check_real("SamplingParams.repeat_penalty", self.repeat_penalty, 0.0, lo_open=True)
        check_int("SamplingParams.top_k", self.top_k, -(2**31))
        if self.top_k < 0:
            self.top_k = 0
        check_int("SamplingParams.repeat_last_n", self.repeat_last_n, -1)
        if self.mirostat_mode not in (0, 1, 2):
            raise ParameterError(f"SamplingParams.mirostat_mode must be 0 (off), 1 or 2, "
                                 f"got {self.mirostat_mode!r}")
        for name in ("mirostat_tau", "mirostat_eta"):
            check_real(f"SamplingParams.{name}", getattr(self, name), 0.0, lo_open=True)
        if self.seed is not None:
            check_int("SamplingParams.seed", self.seed, -1, 2**64 - 1)
        if not isinstance(self.logit_bias, dict):
            raise ParameterTypeError(f"SamplingParams.logit_bias must be a dict "
                                     f"{{token_id: bias}}, not {type(self.logit_bias).__name__}")
        bias = {}
        for k, v in self.logit_bias.items():
            if isinstance(k, str) and k.strip().isdigit():   # OpenAI's JSON keys are strings
                k = int(k)
            if not _is_int(k) or k < 0:
                raise ParameterError(f"SamplingParams.logit_bias key {k!r} is not a token id "
                                     "(an int >= 0)")
            if not _is_real(v) or math.isnan(v) or v == math.inf:
                raise ParameterError(f"SamplingParams.logit_bias[{k}] must be a number "
                                     f"(-inf bans the token), got {v!r}")
            bias[int(k)] = float(v)
        self.logit_bias = bias


class Sampler:
    """Draws token ids for one sequence; holds its random state."""

    def __init__(self, params: SamplingParams, n_vocab: int, constraint=None,
                 processors: Sequence = ()) -> None:
        check_int("n_vocab", n_vocab, 1)
        for k in params.logit_bias:
            if k >= n_vocab:
                raise ParameterError(f"SamplingParams.logit_bias key {k} out of range "
                                     f"[0, {n_vocab})")
        banned = sum(1 for v in params.logit_bias.values() if v == -math.inf)
        if banned == n_vocab:
            raise ParameterError(f"logit_bias bans every one of the {n_vocab} tokens; "
                                 "nothing could be sampled")
        self.params = params
        self.n_vocab = int(n_vocab)
        self.constraint = constraint      # grammar.GrammarConstraint or None
        self.processors = list(processors)  # llama-cpp-python logits processors: f(ids, scores)
        self.mirostat = (Mirostat(params.mirostat_mode, params.mirostat_tau,
                                  params.mirostat_eta, self.n_vocab)
                         if params.mirostat_mode else None)
        self._bias_ids = np.fromiter(params.logit_bias.keys(), np.int64, len(params.logit_bias))
        self._bias = np.fromiter(params.logit_bias.values(), np.float64, len(params.logit_bias))
        # generated_only: penalties count the tokens after the first history given
        # (the prompt) only, as llama-cpp-python's, whose penalty sampler sees the
        # tokens it sampled; Llama's samplers set it (prompt_len: that first length)
        self.generated_only = False
        self.prompt_len: int | None = None
        seed = params.seed
        self.rng = np.random.default_rng(None if seed is None or seed == -1 else int(seed))

    def sample(self, logits: np.ndarray, history: Sequence[int] = ()) -> int:
        """One token id from logits (n_vocab,), given the ids so far."""
        ids, probs = self.candidates(logits, history)
        if ids.size == 1:
            return self._chosen(int(ids[0]))
        cdf = np.cumsum(probs)
        i = min(int(np.searchsorted(cdf, self.rng.random() * cdf[-1], side="right")),
                ids.size - 1)
        if self.mirostat is not None:
            self.mirostat.update(float(probs[i] / cdf[-1]))
        return self._chosen(int(ids[i]))

    def _chosen(self, token: int) -> int:
        if self.constraint is not None:
            self.constraint.accept(token)
        return token

    def candidates(self, logits: np.ndarray, history: Sequence[int] = ()
                   ) -> tuple[np.ndarray, np.ndarray]:
        """The distribution the draw is made from: (ids, probs) of the tokens
        the chain keeps (one id with probability 1 when greedy)."""
        p = self.params
        x = np.array(logits, dtype=np.float64).reshape(-1)        # (n_vocab,) copy
        if x.shape[0] != self.n_vocab:
            raise ParameterError(f"logits have {x.shape[0]} entries, expected n_vocab={self.n_vocab}")
        for proc in self.processors:
            x = np.array(proc(np.asarray(history, np.intc), x.astype(np.float32)),
                         dtype=np.float64).reshape(-1)
            if x.shape[0] != self.n_vocab:
                raise ParameterError(f"a logits_processor returned {x.shape[0]} scores, "
                                     f"expected n_vocab={self.n_vocab}")
        if self.generated_only:
            if self.prompt_len is None:
                self.prompt_len = len(history)
            history = history[self.prompt_len:]
        self._penalize(x, history)
        if self._bias_ids.size:
            x[self._bias_ids] += self._bias
        if self.constraint is not None:
            self.constraint.apply(x)
        top = x.max()
        if not math.isfinite(top):   # (the max of an array holding a NaN is NaN: one pass suffices)
            raise InvalidArgumentError(
                "no token can be sampled: the logits after penalties, logit_bias and grammar "
                + ("contain NaN" if np.isnan(x).any() else "are all -inf"))
        if p.temperature <= 0:
            return np.array([int(np.argmax(x))]), np.ones(1)

        ids = np.arange(self.n_vocab)                             # (n,) candidates
        if self.mirostat is not None:
            return self.mirostat.keep(ids, _softmax(x / p.temperature))
        if 0 < p.top_k < ids.size:
            keep = _top_n(x, p.top_k)
            ids, x = ids[keep], x[keep]
        if p.typical_p < 1.0:
            ids, x = _typical(ids, x, p.typical_p)
        if p.top_p < 1.0:
            ids, x = _top_p(ids, x, p.top_p)
        if p.min_p > 0.0:
            keep = x >= x.max() + math.log(p.min_p)
            ids, x = ids[keep], x[keep]
        return ids, _softmax(x / p.temperature)

    def _penalize(self, x: np.ndarray, history: Sequence[int]) -> None:
        p = self.params
        if p.repeat_last_n == 0 or len(history) == 0 or (
                p.repeat_penalty == 1.0 and p.presence_penalty == 0.0
                and p.frequency_penalty == 0.0):
            return
        window = history if p.repeat_last_n == -1 else history[-p.repeat_last_n:]
        h = np.asarray(window, dtype=np.int64)
        if h.min() < 0 or h.max() >= self.n_vocab:
            raise ValueError(f"history holds a token id outside [0, {self.n_vocab})")
        tok, count = np.unique(h, return_counts=True)
        v = x[tok]
        v = np.where(v <= 0, v * p.repeat_penalty, v / p.repeat_penalty)
        x[tok] = v - count * p.frequency_penalty - p.presence_penalty


# --- filters: (ids, logits) of the candidates in, the kept ones out -------------
# Candidates stay in an order that depends on the values only (largest first,
# ties by the earlier candidate), not on argpartition's, which varies with
# numpy's SIMD level: the draw maps onto the cdf in that order, and the core's
# chain (native/src/sample_chain.c) keeps the same one.

def _top_n(v: np.ndarray, n: int) -> np.ndarray:
    """Positions of the n largest of v, largest first, ties by the lower position."""
    if n < v.size:
        thr = v[np.argpartition(-v, n - 1)[n - 1]]     # the n-th largest value
        above = np.flatnonzero(v > thr)
        idx = np.concatenate([above, np.flatnonzero(v == thr)[: n - above.size]])
    else:
        idx = np.arange(v.size)
    return idx[np.argsort(-v[idx], kind="stable")]


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def _top_p(ids: np.ndarray, x: np.ndarray, top_p: float):
    """Keep the smallest most-likely prefix whose probability mass is >= top_p."""
    probs = _softmax(x)
    # the answer usually lies in the top m: sort only those when they suffice
    m = min(ids.size, 1024)
    order = _top_n(probs, m)
    cum = np.cumsum(probs[order])
    if cum[-1] < top_p and m < ids.size:
        order = np.argsort(-probs, kind="stable")
        cum = np.cumsum(probs[order])
    n_keep = min(int(np.searchsorted(cum, top_p, side="left")) + 1, order.size)
    keep = order[:n_keep]
    return ids[keep], x[keep]


def _typical(ids: np.ndarray, x: np.ndarray, typical_p: float):
    """Locally typical sampling: keep the tokens whose surprise is closest to
    the entropy, until their mass reaches typical_p."""
    logp = log_softmax(x)
    probs = np.exp(logp)
    entropy = -np.sum(probs * logp)
    order = np.argsort(np.abs(-logp - entropy), kind="stable")
    cum = np.cumsum(probs[order])
    n_keep = min(int(np.searchsorted(cum, typical_p, side="left")) + 1, order.size)
    keep = order[:n_keep]
    return ids[keep], x[keep]


# --- log-probabilities ----------------------------------------------------------

def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log p for logits (..., n_vocab), along the last axis, in float64."""
    x = np.asarray(logits, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))


def top_logprobs(logits: np.ndarray, n: int) -> list[tuple[int, float]]:
    """The n most likely (token_id, log p) of logits (n_vocab,), best first."""
    if not _is_int(n) or n < 0:
        raise ValueError(f"n must be an int >= 0, got {n!r}")
    logp = log_softmax(np.asarray(logits).reshape(-1))
    n = min(n, logp.size)
    if n == 0:
        return []
    head = np.argpartition(-logp, n - 1)[:n] if n < logp.size else np.arange(logp.size)
    head = head[np.argsort(-logp[head], kind="stable")]
    return [(int(i), float(logp[i])) for i in head]
