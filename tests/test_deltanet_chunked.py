"""The chunked (WY / UT) form of the gated delta rule, in numpy, against its
recurrence: the algebra native/src/cuda/deltanet_chunk.cu runs on tensor cores.

Per value head, with q, k l2-normalised (q also / sqrt(dk)), beta =
sigmoid(b), log-decay g = a * softplus(alpha + dt), the recurrence is

    S <- exp(g) S ;  delta = beta (v - S^T k) ;  S <- S + k delta^T ;  o = S^T q

and over a chunk of C tokens from state S0, with G the cumulative log-decay
inside the chunk, A[t, s] = beta_t (k_t . k_s) exp(G_t - G_s) (s < t) and
T = (I + A)^-1 (unit lower triangular):

    delta = T diag(beta) V - T diag(beta exp(G)) (K S0)
    o     = diag(exp(G)) Q S0 + (Q K^T o exp(G_t - G_s), s <= t) delta
    S_end = exp(G_last) S0 + K^T diag(exp(G_last - G_s)) delta

T is built the way the kernel builds it: the 16 x 16 diagonal blocks by
forward substitution, the blocks below them by distance from the diagonal
(T_ij = -T_ii sum_k A_ik T_kj). Chunks start at each micro-batch's first token
(as on the CPU and the GPU), so the tests cut prompts into micro-batches that
cross chunk boundaries, short tails padded with zero rows, and take state
snapshots between micro-batches, resuming from them.
"""
from __future__ import annotations

import numpy as np
import pytest

CHUNK, BLOCK = 64, 16


@pytest.fixture
def rng():
    seed = int(np.random.SeedSequence().entropy % 2**32)
    print("seed", seed)                            # printed on failure, to repeat a case
    return np.random.default_rng(seed)


def _softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def _prepare(qkv, b, alpha, a, dt, nk, dk, dv):
    """per token and value head: q, k (n, nv, dk), v (n, nv, dv), g, beta (n, nv)"""
    n, nv = b.shape
    q = qkv[:, : nk * dk].reshape(n, nk, dk)
    k = qkv[:, nk * dk: 2 * nk * dk].reshape(n, nk, dk)
    v = qkv[:, 2 * nk * dk:].reshape(n, nv, dv)
    heads = np.arange(nv) % nk                     # value head h reads key head h % nk
    q, k = q[:, heads], k[:, heads]
    q = q / np.sqrt(np.sum(q * q, -1, keepdims=True) + 1e-6) / np.sqrt(dk)
    k = k / np.sqrt(np.sum(k * k, -1, keepdims=True) + 1e-6)
    g = a * _softplus(alpha + dt)
    beta = 1 / (1 + np.exp(-b))
    return q, k, v, g, beta


def recurrence(q, k, v, g, beta, S):
    """token by token; S (nv, dk, dv) updated in place; o (n, nv, dv)"""
    o = np.zeros(v.shape)
    for t in range(len(q)):
        S *= np.exp(g[t])[:, None, None]
        sk = np.einsum("hij,hi->hj", S, k[t])
        delta = beta[t][:, None] * (v[t] - sk)
        S += k[t][:, :, None] * delta[:, None, :]
        o[t] = np.einsum("hij,hi->hj", S, q[t])
    return o


def unit_lower_inverse(A):
    """(I + A)^-1 for A (C, C) strictly lower, in 16 x 16 blocks as the kernel does"""
    C = len(A)
    nb = C // BLOCK
    T = np.zeros_like(A)
    blk = lambda M, i, j: M[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK]
    for i in range(nb):                            # diagonal blocks: forward substitution
        D, X = blk(A, i, i), np.eye(BLOCK, dtype=A.dtype)
        for t in range(BLOCK):
            X[t] -= D[t, :t] @ X[:t]
        blk(T, i, i)[:] = X
    for d in range(1, nb):                         # then by distance from the diagonal
        for i in range(d, nb):
            j = i - d
            acc = sum(blk(A, i, m) @ blk(T, m, j) for m in range(j, i))
            blk(T, i, j)[:] = -blk(T, i, i) @ acc
    return T


def chunk(q, k, v, g, beta, S0):
    """one head, one chunk of L <= CHUNK tokens, padded to CHUNK with zero rows
    (k, q, v, beta, g all 0: such rows change nothing); returns o (L, dv), S_end"""
    L = len(q)
    pad = lambda x: np.concatenate([x, np.zeros((CHUNK - L,) + x.shape[1:], x.dtype)])
    q, k, v, g, beta = pad(q), pad(k), pad(v), pad(g), pad(beta)
    G = np.cumsum(g)
    dec = np.exp(np.minimum(G[:, None] - G[None, :], 0))
    tri = np.tril(np.ones((CHUNK, CHUNK), q.dtype))
    A = beta[:, None] * (k @ k.T) * dec * (tri - np.eye(CHUNK, dtype=q.dtype))
    QK = (q @ k.T) * dec * tri
    T = unit_lower_inverse(A)
    T1, T2n = T * beta[None, :], -T * (beta * np.exp(G))[None, :]
    delta = T1 @ v + T2n @ (k @ S0)
    o = np.exp(G)[:, None] * (q @ S0) + QK @ delta
    S = np.exp(G[-1]) * S0 + k.T @ (np.exp(G[-1] - G)[:, None] * delta)
    return o[:L], S


def chunked(q, k, v, g, beta, S):
    """one micro-batch in chunks from its first token; S (nv, dk, dv) updated in place"""
    o = np.zeros(v.shape, v.dtype)
    for t0 in range(0, len(q), CHUNK):
        sl = slice(t0, t0 + CHUNK)
        for h in range(S.shape[0]):
            o[sl, h], S[h] = chunk(q[sl, h], k[sl, h], v[sl, h], g[sl, h], beta[sl, h], S[h])
    return o


def _inputs(rng, n, nk, nv, dk, dv):
    qkv = rng.normal(0, 1, (n, 2 * nk * dk + nv * dv))
    b, alpha = rng.normal(0, 2, (n, nv)), rng.normal(0, 1.5, (n, nv))
    a = -np.exp(rng.uniform(np.log(0.02), np.log(2.0), nv))
    dt = rng.uniform(-1, 1, nv)
    S0 = rng.normal(0, 0.5, (nv, dk, dv))
    return _prepare(qkv, b, alpha, a, dt, nk, dk, dv), S0


def _rel(x, ref):
    return np.linalg.norm(x - ref) / np.linalg.norm(ref)


@pytest.mark.parametrize("nk,nv,dk,dv", [(2, 4, 32, 32), (1, 3, 48, 40), (2, 6, 128, 128)])
def test_one_micro_batch_equals_the_recurrence(rng, nk, nv, dk, dv):
    n = int(rng.integers(65, 200))                 # several chunks and a short tail
    (q, k, v, g, beta), S0 = _inputs(rng, n, nk, nv, dk, dv)
    S_ref, S = S0.copy(), S0.copy()
    o_ref = recurrence(q, k, v, g, beta, S_ref)
    o = chunked(q, k, v, g, beta, S)
    assert _rel(o, o_ref) < 1e-10 and _rel(S, S_ref) < 1e-10


def test_the_blocked_inverse_is_the_inverse(rng):
    A = np.tril(rng.normal(0, 0.3, (CHUNK, CHUNK)), -1)
    T = unit_lower_inverse(A)
    assert np.allclose(T @ (np.eye(CHUNK) + A), np.eye(CHUNK), atol=1e-10)
    assert np.all(np.triu(T, 1) == 0) and np.all(np.diag(T) == 1)


def test_micro_batches_and_snapshots(rng):
    """a prompt cut into micro-batches of random sizes (chunks restart at each),
    snapshots at the cuts; resuming from a snapshot gives the rest again"""
    nk, nv, dk, dv = 2, 4, 32, 24
    n = int(rng.integers(300, 420))
    (q, k, v, g, beta), S0 = _inputs(rng, n, nk, nv, dk, dv)
    S_ref = S0.copy()
    o_ref = recurrence(q, k, v, g, beta, S_ref)
    cuts = np.sort(rng.choice(np.arange(1, n), size=5, replace=False))
    bounds = [0, *cuts.tolist(), n]
    S, o, snaps = S0.copy(), np.zeros_like(o_ref), {}
    for lo, hi in zip(bounds, bounds[1:]):
        o[lo:hi] = chunked(q[lo:hi], k[lo:hi], v[lo:hi], g[lo:hi], beta[lo:hi], S)
        snaps[hi] = S.copy()
    assert _rel(o, o_ref) < 1e-10 and _rel(S, S_ref) < 1e-10
    at = int(rng.choice(cuts))                     # back to a snapshot inside the prompt
    S2 = snaps[at].copy()
    o2 = chunked(q[at:], k[at:], v[at:], g[at:], beta[at:], S2)
    assert _rel(o2, o_ref[at:]) < 1e-10 and _rel(S2, S_ref) < 1e-10


def test_float32_chunked_stays_near_the_recurrence(rng):
    """in float32 (the kernel's arithmetic, without the tensor cores' split)
    the two forms differ by rounding only, also after many chunks"""
    nk, nv, dk, dv = 1, 2, 64, 32
    n = 64 * 12 + int(rng.integers(1, 64))
    (q, k, v, g, beta), S0 = _inputs(rng, n, nk, nv, dk, dv)
    S_ref = S0.copy()
    o_ref = recurrence(q, k, v, g, beta, S_ref)
    f = lambda x: x.astype(np.float32)
    S = f(S0)
    o = chunked(f(q), f(k), f(v), f(g), f(beta), S)
    assert _rel(o, o_ref) < 1e-4 and _rel(S, S_ref) < 1e-4
