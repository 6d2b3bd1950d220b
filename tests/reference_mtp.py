"""A plain numpy MTP (nextn) block of a qwen35 GGUF (float64): the facts in
native/src/mtp.h. Row t of the block takes the trunk's output-normed hidden
state h_t and the token at t + 1: u = eh_proj @ [enorm(embed) | hnorm(h_t)],
one gated full-attention block over the block's own rows 0..t, then
g = shared_head_norm(u) and logits = g @ output (the token at t + 2). Drafts
chain: the row after the last known token takes the previous row's g and its
arg-max token."""
from __future__ import annotations

import numpy as np

from pyllamakv.core.native import model_params
from pyllamakv.gguf.reader import GGUFFile
from reference import _mat, _rmsnorm
from reference_qwen35 import _attention, _ffn, reference_hidden_qwen35


def _block(f, hp, hidden, toks):
    """g (n, E) and logits (n, V) of the block's rows 0..n-1 (causal among them)."""
    il, eps = hp["n_layer"], hp["rms_eps"]
    g = lambda s: _mat(f, f"blk.{il}.{s}")
    e = _mat(f, "token_embd.weight")[np.asarray(toks)]
    cat = np.concatenate([_rmsnorm(e, g("nextn.enorm.weight"), eps),
                          _rmsnorm(hidden, g("nextn.hnorm.weight"), eps)], axis=1)
    x = cat @ g("nextn.eh_proj.weight").T
    pos = np.arange(len(toks))
    x = x + _attention(g, _rmsnorm(x, g("attn_norm.weight"), eps), hp, pos, lambda v: v)
    x = _ffn(g, x, hp, lambda v: v)
    head_norm = g("nextn.shared_head_norm.weight")
    out = _rmsnorm(x, head_norm if head_norm is not None else _mat(f, "output_norm.weight"), eps)
    return out, out @ _mat(f, "output.weight").T


def reference_mtp_draft(path, tokens, token, k):
    """The block's k arg-max drafts after tokens + [token] and their logits (k, V)."""
    f = GGUFFile(path)
    hp = model_params(f)
    hidden = list(reference_hidden_qwen35(path, tokens))
    toks = list(tokens[1:]) + [int(token)]
    drafts, logits = [], []
    for _ in range(k):
        out, lg = _block(f, hp, np.asarray(hidden), toks)
        logits.append(lg[-1])
        drafts.append(int(np.argmax(lg[-1])))
        hidden.append(out[-1])
        toks.append(drafts[-1])
    return np.asarray(drafts), np.asarray(logits)
