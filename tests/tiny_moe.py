"""Tiny random mixture-of-experts models: qwen3moe and qwen35moe.

Weights are drawn in Hugging Face's convention (the state dict of
``Qwen3MoeForCausalLM`` / ``Qwen3_5MoeForCausalLM``: the router ``mlp.gate``,
the experts stacked as ``mlp.experts.gate_up_proj`` (X, 2 Fe, E) and
``mlp.experts.down_proj`` (X, E, Fe), qwen35moe's ``mlp.shared_expert.*`` and
``mlp.shared_expert_gate``), turned into GGUF tensors the way llama.cpp's
converter does (the fused gate_up split into ``ffn_gate_exps`` and
``ffn_up_exps``, or kept as ``ffn_gate_up_exps`` with ``fused``, the router ``ffn_gate_inp``, the shared gate a vector
``ffn_gate_inp_shexp``), and written with gguf.GGUFWriter. The router stays
f32 in every file, as llama.cpp's quantizer leaves it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter

from tiny_models import _add_vocab, write_weights
from tiny_qwen35 import Qwen35Config
from tiny_qwen35 import gguf_tensors as qwen35_gguf_tensors
from tiny_qwen35 import hf_weights as qwen35_hf_weights
from tiny_qwen35 import nextn_tensors as qwen35_nextn_tensors

from synthetic_model import qwen35_metadata  # noqa: E402   (on the path tiny_qwen35 sets)


@dataclass
class Qwen3MoeConfig:
    n_vocab: int = 320
    n_embd: int = 128
    n_layer: int = 3
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 64
    n_ff: int = 192            # the dense width the file names (unused: every layer is MoE)
    n_expert: int = 8
    n_used: int = 2
    n_ff_exp: int = 64
    norm: bool | None = None   # expert_weights_norm; None: the key is absent (llama.cpp: True)
    fused: bool = False        # ffn_gate_up_exps (the converter's --fuse-gate-up-exps)
    rope_base: float = 1e6
    eps: float = 1e-6


@dataclass
class Qwen35MoeConfig(Qwen35Config):
    n_layer: int = 4
    n_ff: int = 32             # feed_forward_length (no dense FFN: its MLP is dropped)
    n_expert: int = 8
    n_used: int = 2
    n_ff_exp: int = 64
    n_ff_shexp: int = 96
    fused: bool = False        # ffn_gate_up_exps (the converter's --fuse-gate-up-exps)


def _mat(rng, *shape, scale=None):
    s = 1.0 / np.sqrt(shape[-1]) if scale is None else scale
    return (rng.standard_normal(shape) * s).astype(np.float32)


def _moe_hf(cfg, rng, p: str, shared: bool) -> dict[str, np.ndarray]:
    """One layer's HF MoE block weights under prefix p (model.layers.i.)."""
    E, X, F = cfg.n_embd, cfg.n_expert, cfg.n_ff_exp
    w = {p + "mlp.gate.weight": _mat(rng, X, E, scale=2.0 / np.sqrt(E)),
         p + "mlp.experts.gate_up_proj": _mat(rng, X, 2 * F, E),
         p + "mlp.experts.down_proj": _mat(rng, X, E, F)}
    if shared:
        S = cfg.n_ff_shexp
        w[p + "mlp.shared_expert.gate_proj.weight"] = _mat(rng, S, E)
        w[p + "mlp.shared_expert.up_proj.weight"] = _mat(rng, S, E)
        w[p + "mlp.shared_expert.down_proj.weight"] = _mat(rng, E, S)
        w[p + "mlp.shared_expert_gate.weight"] = _mat(rng, 1, E)
    return w


def _moe_gguf(cfg, w, p: str, b: str, shared: bool) -> dict[str, np.ndarray]:
    F = cfg.n_ff_exp
    gu = w[p + "mlp.experts.gate_up_proj"]
    g = {b + "ffn_gate_inp.weight": w[p + "mlp.gate.weight"],
         b + "ffn_down_exps.weight": w[p + "mlp.experts.down_proj"]}
    if cfg.fused:   # per expert its gate rows, then its up rows: HF's own layout
        g[b + "ffn_gate_up_exps.weight"] = gu
    else:
        g[b + "ffn_gate_exps.weight"], g[b + "ffn_up_exps.weight"] = gu[:, :F], gu[:, F:]
    if shared:
        for hf, gg in (("gate_proj", "ffn_gate_shexp"), ("up_proj", "ffn_up_shexp"),
                       ("down_proj", "ffn_down_shexp")):
            g[b + gg + ".weight"] = w[p + f"mlp.shared_expert.{hf}.weight"]
        g[b + "ffn_gate_inp_shexp.weight"] = w[p + "mlp.shared_expert_gate.weight"][0]
    return g


# ---------------------------------------------------------------- qwen3moe

def qwen3moe_hf_weights(cfg: Qwen3MoeConfig, rng) -> dict[str, np.ndarray]:
    E, Q, KV = cfg.n_embd, cfg.n_head * cfg.head_dim, cfg.n_head_kv * cfg.head_dim
    vec = lambda n: (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)  # noqa: E731
    w = {"model.embed_tokens.weight": _mat(rng, cfg.n_vocab, E, scale=1.0),
         "lm_head.weight": _mat(rng, cfg.n_vocab, E), "model.norm.weight": vec(E)}
    for il in range(cfg.n_layer):
        p = f"model.layers.{il}."
        w[p + "input_layernorm.weight"] = vec(E)
        w[p + "post_attention_layernorm.weight"] = vec(E)
        a = p + "self_attn."
        w[a + "q_proj.weight"] = _mat(rng, Q, E)
        w[a + "k_proj.weight"] = _mat(rng, KV, E)
        w[a + "v_proj.weight"] = _mat(rng, KV, E)
        w[a + "o_proj.weight"] = _mat(rng, E, Q)
        w[a + "q_norm.weight"] = vec(cfg.head_dim)
        w[a + "k_norm.weight"] = vec(cfg.head_dim)
        w.update(_moe_hf(cfg, rng, p, shared=False))
    return w


def qwen3moe_gguf_tensors(cfg: Qwen3MoeConfig, w) -> dict[str, np.ndarray]:
    g = {"token_embd.weight": w["model.embed_tokens.weight"],
         "output.weight": w["lm_head.weight"], "output_norm.weight": w["model.norm.weight"]}
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm"}
    for il in range(cfg.n_layer):
        p, b = f"model.layers.{il}.", f"blk.{il}."
        for hf, gg in names.items():
            g[b + gg + ".weight"] = w[p + hf + ".weight"]
        g.update(_moe_gguf(cfg, w, p, b, shared=False))
    return {k: np.ascontiguousarray(v, np.float32) for k, v in g.items()}


def _moe_keys(w: GGUFWriter, cfg) -> None:
    w.add_expert_count(cfg.n_expert)
    w.add_expert_used_count(cfg.n_used)
    w.add_expert_feed_forward_length(cfg.n_ff_exp)


def _f32_names(experts_only: bool, *always: str):
    """write_weights' keep_f32: the names in always, and with experts_only all but the
    experts' (routed and shared) tensors"""
    return lambda name: any(a in name for a in always) or (experts_only and "exp" not in name)


def write_qwen3moe(path, cfg: Qwen3MoeConfig, tensors, wtype: T = T.F32,
                   experts_only: bool = False) -> Path:
    """Writes the tensors: matrices in wtype (with experts_only only the experts'), the
    router and vectors in f32."""
    w = GGUFWriter(str(path), "qwen3moe")
    w.add_block_count(cfg.n_layer)
    w.add_context_length(4096)
    w.add_embedding_length(cfg.n_embd)
    w.add_feed_forward_length(cfg.n_ff)
    w.add_head_count(cfg.n_head)
    w.add_head_count_kv(cfg.n_head_kv)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_rope_freq_base(cfg.rope_base)
    w.add_layer_norm_rms_eps(cfg.eps)
    _moe_keys(w, cfg)
    if cfg.norm is not None:
        w.add_expert_weights_norm(cfg.norm)
    w.add_vocab_size(cfg.n_vocab)
    _add_vocab(w, cfg.n_vocab)
    write_weights(w, tensors, wtype, keep_f32=_f32_names(experts_only, "ffn_gate_inp"))
    return Path(path)


# ---------------------------------------------------------------- qwen35moe

def qwen35moe_hf_weights(cfg: Qwen35MoeConfig, rng) -> dict[str, np.ndarray]:
    """qwen35's attention and DeltaNet weights (tiny_qwen35), the dense MLP replaced by
    routed experts and a shared expert."""
    w = qwen35_hf_weights(cfg, rng)   # its dense MLP goes
    for k in [k for k in w if ".mlp." in k]:
        del w[k]
    for il in range(cfg.n_layer):
        w.update(_moe_hf(cfg, rng, f"model.layers.{il}.", shared=True))
    return w


def qwen35moe_gguf_tensors(cfg: Qwen35MoeConfig, w) -> dict[str, np.ndarray]:
    dense = dict(w)
    for il in range(cfg.n_layer):   # tiny_qwen35's converter wants a dense MLP: a stand-in
        p = f"model.layers.{il}.mlp."
        for n in ("gate_proj", "up_proj", "down_proj"):
            dense[p + n + ".weight"] = np.zeros((1, 1), np.float32)
    g = qwen35_gguf_tensors(cfg, dense)
    for k in [k for k in g if ".ffn_gate.weight" in k or ".ffn_up.weight" in k
              or ".ffn_down.weight" in k]:
        del g[k]
    for il in range(cfg.n_layer):
        g.update(_moe_gguf(cfg, w, f"model.layers.{il}.", f"blk.{il}.", shared=True))
    return {k: np.ascontiguousarray(v, np.float32) for k, v in g.items()}


def write_qwen35moe(path, cfg: Qwen35MoeConfig, tensors, wtype: T = T.F32,
                    experts_only: bool = False) -> Path:
    """As write_qwen3moe; the conv taps stay f32 too."""
    w = GGUFWriter(str(path), "qwen35moe")
    w.add_block_count(cfg.n_layer + cfg.n_nextn)
    qwen35_metadata(w, cfg, n_ctx_train=4096)
    _moe_keys(w, cfg)
    w.add_expert_shared_feed_forward_length(cfg.n_ff_shexp)
    w.add_vocab_size(cfg.n_vocab)
    _add_vocab(w, cfg.n_vocab)
    write_weights(w, tensors, wtype, keep_f32=_f32_names(experts_only, "ssm_conv1d",
                                                         "ffn_gate_inp"))
    return Path(path)


def qwen35moe_nextn_tensors(cfg: Qwen35MoeConfig, rng) -> dict[str, np.ndarray]:
    """Random MTP blocks blk.{n_layer + i}: qwen35's, their FFN routed experts and a shared one."""
    g = {k: v for k, v in qwen35_nextn_tensors(cfg, rng).items()
         if not any(f".{n}.weight" in k for n in ("ffn_gate", "ffn_up", "ffn_down"))}
    for i in range(cfg.n_nextn):
        p = f"mtp.{i}."
        g.update(_moe_gguf(cfg, _moe_hf(cfg, rng, p, True), p, f"blk.{cfg.n_layer + i}.", True))
    return {k: np.ascontiguousarray(v, np.float32) for k, v in g.items()}


def write_tiny_qwen3moe(path, wtype: T = T.Q8_0, seed: int | None = None, **kw) -> Path:
    """A random qwen3moe model at path; kw override Qwen3MoeConfig's fields."""
    cfg = Qwen3MoeConfig(**kw)
    rng = np.random.default_rng(seed)
    return write_qwen3moe(path, cfg, qwen3moe_gguf_tensors(cfg, qwen3moe_hf_weights(cfg, rng)),
                          wtype)


def write_tiny_qwen35moe(path, wtype: T = T.Q8_0, seed: int | None = None, **kw) -> Path:
    """A random qwen35moe model at path (MTP blocks with n_nextn); kw override
    Qwen35MoeConfig's fields."""
    cfg = Qwen35MoeConfig(**kw)
    rng = np.random.default_rng(seed)
    tensors = qwen35moe_gguf_tensors(cfg, qwen35moe_hf_weights(cfg, rng))
    tensors.update(qwen35moe_nextn_tensors(cfg, rng))
    return write_qwen35moe(path, cfg, tensors, wtype)
