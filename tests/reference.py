"""A plain numpy forward pass (float64, weights dequantized with gguf.quants):
the reference the engine's logits are checked against on tiny models."""
from __future__ import annotations

import numpy as np
from gguf import quants

from pyllamakv.core.native import model_params
from pyllamakv.gguf.reader import GGUFFile


def _mat(f: GGUFFile, name: str) -> np.ndarray | None:
    t = next((t for t in f.tensors if t.name == name), None)
    if t is None:
        return None
    raw = np.asarray(t.data, dtype=np.uint8)
    from gguf import GGMLQuantizationType as Q
    qt = Q(t.type)
    if qt == Q.F32:
        a = raw.view(np.float32)
    elif qt == Q.F16:
        a = raw.view(np.float16)
    else:
        a = quants.dequantize(raw, qt)
    return np.asarray(a, dtype=np.float64).reshape(tuple(reversed(t.shape)))


def _rmsnorm(x, w, eps):
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y * w if w is not None else y


def _rope(x, pos, rope_dim, base, scale, neox):
    # x (n, heads, hd)
    half = rope_dim // 2
    inv = base ** (-np.arange(half, dtype=np.float64) * 2.0 / rope_dim)
    th = (np.asarray(pos, np.float64)[:, None] * scale) * inv[None, :]
    c, s = np.cos(th)[:, None, :], np.sin(th)[:, None, :]
    x = x.copy()
    if neox:
        a, b = x[..., :half].copy(), x[..., half:rope_dim].copy()
        x[..., :half], x[..., half:rope_dim] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., 0:rope_dim:2].copy(), x[..., 1:rope_dim:2].copy()
        x[..., 0:rope_dim:2], x[..., 1:rope_dim:2] = a * c - b * s, a * s + b * c
    return x


def reference_logits(path, tokens) -> np.ndarray:
    """Logits (n, n_vocab) of every token of `tokens` decoded from position 0."""
    f = GGUFFile(path)
    out = _mat(f, "output.weight")
    if out is None:
        out = _mat(f, "token_embd.weight")
    return reference_hidden(path, tokens, f) @ out.T


def reference_hidden(path, tokens, f: GGUFFile | None = None) -> np.ndarray:
    """The final-normed hidden states (n, n_embd) of `tokens` from position 0."""
    f = f or GGUFFile(path)
    hp = model_params(f)
    neox = hp["arch"] in (1, 2)
    hd, nh, nkv = hp["head_dim"], hp["n_head"], hp["n_head_kv"]
    eps = hp["rms_eps"]
    n = len(tokens)
    x = _mat(f, "token_embd.weight")[np.asarray(tokens)]
    pos = np.arange(n)
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for il in range(hp["n_layer"]):
        g = lambda s: _mat(f, f"blk.{il}.{s}")
        h = _rmsnorm(x, g("attn_norm.weight"), eps)
        q, k, v = h @ g("attn_q.weight").T, h @ g("attn_k.weight").T, h @ g("attn_v.weight").T
        if g("attn_q.bias") is not None:
            q, k, v = q + g("attn_q.bias"), k + g("attn_k.bias"), v + g("attn_v.bias")
        q, k, v = q.reshape(n, nh, hd), k.reshape(n, nkv, hd), v.reshape(n, nkv, hd)
        if g("attn_q_norm.weight") is not None:
            q = _rmsnorm(q, g("attn_q_norm.weight"), eps)
            k = _rmsnorm(k, g("attn_k_norm.weight"), eps)
        q = _rope(q, pos, hp["rope_dim"], hp["rope_freq_base"], hp["rope_freq_scale"], neox)
        k = _rope(k, pos, hp["rope_dim"], hp["rope_freq_base"], hp["rope_freq_scale"], neox)
        rep = nh // nkv
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + mask
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        o = np.einsum("hqk,khd->qhd", p, v).reshape(n, nh * hd)
        x = x + o @ g("attn_output.weight").T
        h = _rmsnorm(x, g("ffn_norm.weight"), eps)
        a, b = h @ g("ffn_gate.weight").T, h @ g("ffn_up.weight").T
        x = x + (a / (1 + np.exp(-a)) * b) @ g("ffn_down.weight").T
    return _rmsnorm(x, _mat(f, "output_norm.weight"), eps)
