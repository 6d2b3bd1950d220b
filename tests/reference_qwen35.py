"""A plain numpy forward of the qwen35 hybrid (float64, read from the GGUF):
gated full attention every full_attn_interval-th layer, Gated DeltaNet
layers between, the delta rule run token by token as its recurrence (the
engine runs it in chunks for prefill), causal conv over a zero history."""
from __future__ import annotations

import numpy as np

from pyllamakv.core.native import model_params
from pyllamakv.gguf.reader import GGUFFile
from reference import _mat, _rmsnorm, _rope


def _silu(x):
    return x / (1 + np.exp(-x))


def _attention(g, h, hp, pos, act):
    n, hd, nh, nkv = len(h), hp["head_dim"], hp["n_head"], hp["n_head_kv"]
    h = act(h)
    qg = (h @ g("attn_q.weight").T).reshape(n, nh, 2 * hd)
    q, gate = qg[..., :hd], qg[..., hd:].reshape(n, nh * hd)
    k = (h @ g("attn_k.weight").T).reshape(n, nkv, hd)
    v = (h @ g("attn_v.weight").T).reshape(n, nkv, hd)
    q = _rmsnorm(q, g("attn_q_norm.weight"), hp["rms_eps"])
    k = _rmsnorm(k, g("attn_k_norm.weight"), hp["rms_eps"])
    q = _rope(q, pos, hp["rope_dim"], hp["rope_freq_base"], hp["rope_freq_scale"], True)
    k = _rope(k, pos, hp["rope_dim"], hp["rope_freq_base"], hp["rope_freq_scale"], True)
    k, v = np.repeat(k, nh // nkv, axis=1), np.repeat(v, nh // nkv, axis=1)
    s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + np.triu(np.full((n, n), -np.inf), 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = np.einsum("hqk,khd->qhd", p, v).reshape(n, nh * hd)
    return act(o / (1 + np.exp(-gate))) @ g("attn_output.weight").T


def _l2(x, eps):
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps)


def _deltanet(g, h, hp, act):
    n = len(h)
    h = act(h)
    nk, nv, dk, dv = (hp[k] for k in ("ssm_n_k_heads", "ssm_n_v_heads", "ssm_head_k_dim",
                                      "ssm_head_v_dim"))
    K = hp["ssm_conv_kernel"]
    qkv = h @ g("attn_qkv.weight").T
    z = (h @ g("attn_gate.weight").T).reshape(n, nv, dv)
    beta = 1 / (1 + np.exp(-(h @ g("ssm_beta.weight").T)))
    alpha = h @ g("ssm_alpha.weight").T
    decay = g("ssm_a") * np.logaddexp(0, alpha + g("ssm_dt.bias"))      # (n, nv), log space
    taps = g("ssm_conv1d.weight")                                         # (ch, K)
    padded = np.concatenate([np.zeros((K - 1, qkv.shape[1])), qkv])
    conv = sum(padded[j:j + n] * taps[:, j] for j in range(K))
    conv = _silu(conv)
    q = _l2(conv[:, :nk * dk].reshape(n, nk, dk), hp["rms_eps"]) / np.sqrt(dk)
    k = _l2(conv[:, nk * dk:2 * nk * dk].reshape(n, nk, dk), hp["rms_eps"])
    v = conv[:, 2 * nk * dk:].reshape(n, nv, dv)
    kh = np.arange(nv) % nk                                               # tiled value heads
    S = np.zeros((nv, dk, dv))
    out = np.zeros((n, nv, dv))
    for t in range(n):
        S *= np.exp(decay[t])[:, None, None]
        kt, qt = k[t, kh], q[t, kh]                                       # (nv, dk)
        delta = beta[t][:, None] * (v[t] - np.einsum("hkv,hk->hv", S, kt))
        S += kt[:, :, None] * delta[:, None, :]
        out[t] = np.einsum("hkv,hk->hv", S, qt)
    y = _rmsnorm(out, g("ssm_norm.weight"), hp["rms_eps"]) * _silu(z)
    return act(y.reshape(n, nv * dv)) @ g("ssm_out.weight").T


def _ffn(g, x, hp, act):
    h = act(_rmsnorm(x, g("post_attention_norm.weight"), hp["rms_eps"]))
    a, b = h @ g("ffn_gate.weight").T, h @ g("ffn_up.weight").T
    return x + act(_silu(a) * b) @ g("ffn_down.weight").T


def reference_hidden_qwen35(path, tokens, act=lambda x: x) -> np.ndarray:
    """The final hidden states (n, n_embd) after output_norm, the LM head's input."""
    f = GGUFFile(path)
    hp = model_params(f)
    n = len(tokens)
    x = _mat(f, "token_embd.weight")[np.asarray(tokens)]
    pos = np.arange(n)
    for il in range(hp["n_layer"]):
        g = lambda s: _mat(f, f"blk.{il}.{s}")
        h = _rmsnorm(x, g("attn_norm.weight"), hp["rms_eps"])
        if (il + 1) % hp["full_attn_interval"] == 0:
            x = x + _attention(g, h, hp, pos, act)
        else:
            x = x + _deltanet(g, h, hp, act)
        x = _ffn(g, x, hp, act)
    return _rmsnorm(x, _mat(f, "output_norm.weight"), hp["rms_eps"])


def reference_logits_qwen35(path, tokens, act=lambda x: x) -> np.ndarray:
    """Logits (n, n_vocab) of every token of `tokens` decoded from position 0;
    act(x) is applied to every matmul's input (the engine's activation rounding)."""
    f = GGUFFile(path)
    return act(reference_hidden_qwen35(path, tokens, act)) @ _mat(f, "output.weight").T
