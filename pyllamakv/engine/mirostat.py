"""Mirostat sampling (Basu et al., 2021): a target surprise instead of top-k/top-p.

Each draw keeps the candidates whose surprise (-log2 p) stays under a running
bound mu, draws one, and moves mu by eta times the gap between the drawn
token's surprise and the target tau. Version 1 estimates the Zipf exponent of
the distribution from its 100 most likely tokens and keeps the top k that
exponent says reach mu; version 2 cuts at mu directly. mu starts at 2 tau, as
llama.cpp's samplers start it. Both run after the temperature is applied.
"""
from __future__ import annotations

import math

import numpy as np


class Mirostat:
    def __init__(self, mode: int, tau: float, eta: float, n_vocab: int) -> None:
        self.mode, self.tau, self.eta, self.n_vocab = mode, tau, eta, n_vocab
        self.mu = 2.0 * tau

    def keep(self, ids: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The candidates (sorted by probability, renormalised) a draw is made from."""
        order = np.argsort(-probs, kind="stable")
        ids, probs = ids[order], probs[order]
        if self.mode == 1:
            m = min(100, probs.size)
            if m >= 2:
                t = np.log(np.arange(2, m + 1) / np.arange(1, m))
                b = np.log(np.maximum(probs[:m - 1], 1e-300) / np.maximum(probs[1:m], 1e-300))
                s_hat = float(np.dot(t, b) / np.dot(t, t))
            else:
                s_hat = 1.0
            eps = s_hat - 1.0
            if abs(eps) < 1e-9:
                k = probs.size
            else:
                k = ((eps * 2.0 ** self.mu) / (1.0 - self.n_vocab ** (-eps))) ** (1.0 / s_hat)
            n = int(min(max(1, round(k)), probs.size)) if math.isfinite(k) else probs.size
        else:
            surprise = -np.log2(np.maximum(probs, 1e-300))
            n = max(1, int(np.count_nonzero(surprise <= self.mu)))
        ids, probs = ids[:n], probs[:n]
        return ids, probs / probs.sum()

    def update(self, p_chosen: float) -> None:
        surprise = -math.log2(max(p_chosen, 1e-300))
        self.mu -= self.eta * (surprise - self.tau)
