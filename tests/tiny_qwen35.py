"""Tiny random qwen35 (Qwen3.5 hybrid) models.

Weights are drawn in Hugging Face's convention (``Qwen3_5ForCausalLM`` state
dict names and layouts), turned into GGUF tensors the way llama.cpp's
converter does (norm weights + 1 except the DeltaNet's gated norm, A_log ->
-exp(A_log), conv taps squeezed, value heads reordered from grouped-by-key-head
to tiled), and written with gguf.GGUFWriter. The HF test loads the same HF
weights into transformers; every other test reads the GGUF.
"""
from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter

from tiny_models import write_weights

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from synthetic_model import qwen35_metadata  # noqa: E402   (the benchmarks' writer: the same keys)


@dataclass
class Qwen35Config:
    n_vocab: int = 320
    n_embd: int = 128
    n_layer: int = 8           # trunk layers
    interval: int = 4          # layer i is full attention when (i + 1) % interval == 0
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 64
    rope_dim: int = 16
    n_ff: int = 256
    nk: int = 2                # delta-rule key heads
    nv: int = 4                # delta-rule value heads
    dk: int = 32
    dv: int = 32
    conv: int = 4
    n_nextn: int = 0           # MTP blocks
    rope_base: float = 1e7
    eps: float = 1e-6

    def is_attention(self, il: int) -> bool:
        return (il + 1) % self.interval == 0


def hf_weights(cfg: Qwen35Config, rng) -> dict[str, np.ndarray]:
    """A random HF state dict (float32), Qwen3_5ForCausalLM names."""
    E, F = cfg.n_embd, cfg.n_ff
    KD, VD = cfg.nk * cfg.dk, cfg.nv * cfg.dv
    w: dict[str, np.ndarray] = {}

    def mat(name, rows, cols, scale=None):
        s = 1.0 / np.sqrt(cols) if scale is None else scale
        w[name] = (rng.standard_normal((rows, cols)) * s).astype(np.float32)

    def vec(name, n, base=0.0, spread=0.2):
        w[name] = (base + spread * rng.standard_normal(n)).astype(np.float32)

    mat("model.embed_tokens.weight", cfg.n_vocab, E, 1.0)
    mat("lm_head.weight", cfg.n_vocab, E)
    vec("model.norm.weight", E)
    for il in range(cfg.n_layer):
        p = f"model.layers.{il}."
        vec(p + "input_layernorm.weight", E)
        vec(p + "post_attention_layernorm.weight", E)
        if cfg.is_attention(il):
            a = p + "self_attn."
            mat(a + "q_proj.weight", 2 * cfg.n_head * cfg.head_dim, E)
            mat(a + "k_proj.weight", cfg.n_head_kv * cfg.head_dim, E)
            mat(a + "v_proj.weight", cfg.n_head_kv * cfg.head_dim, E)
            mat(a + "o_proj.weight", E, cfg.n_head * cfg.head_dim)
            vec(a + "q_norm.weight", cfg.head_dim)
            vec(a + "k_norm.weight", cfg.head_dim)
        else:
            a = p + "linear_attn."
            mat(a + "in_proj_qkv.weight", 2 * KD + VD, E)
            mat(a + "in_proj_z.weight", VD, E)
            mat(a + "in_proj_b.weight", cfg.nv, E, 2.0 / np.sqrt(E))
            mat(a + "in_proj_a.weight", cfg.nv, E, 1.0 / np.sqrt(E))
            w[a + "conv1d.weight"] = (rng.standard_normal((2 * KD + VD, 1, cfg.conv)) * 0.5
                                      ).astype(np.float32)
            # decays from near 1 (long memory) to strong
            w[a + "A_log"] = np.log(rng.uniform(0.02, 2.0, cfg.nv)).astype(np.float32)
            w[a + "dt_bias"] = rng.uniform(-3.0, 1.0, cfg.nv).astype(np.float32)
            vec(a + "norm.weight", cfg.dv, 1.0)
            mat(a + "out_proj.weight", E, VD)
        mat(p + "mlp.gate_proj.weight", F, E)
        mat(p + "mlp.up_proj.weight", F, E)
        mat(p + "mlp.down_proj.weight", E, F)
    return w


def _tiled(x: np.ndarray, axis: int, nk: int, per_k: int, width: int) -> np.ndarray:
    """Value heads grouped by key head (HF) -> tiled over key heads (llama.cpp's GGUF)."""
    x = np.moveaxis(x, axis, 0)
    rest = x.shape[1:]
    x = x.reshape(nk, per_k, width, *rest).swapaxes(0, 1).reshape(nk * per_k * width, *rest)
    return np.moveaxis(x, 0, axis)


def gguf_tensors(cfg: Qwen35Config, w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The GGUF tensors (numpy row-major, float32) that the converter makes of w."""
    KD = cfg.nk * cfg.dk
    per_k = cfg.nv // cfg.nk
    tiled = (lambda x, axis, width: _tiled(x, axis, cfg.nk, per_k, width)) if per_k > 1 else \
        (lambda x, axis, width: x)
    g = {"token_embd.weight": w["model.embed_tokens.weight"],
         "output.weight": w["lm_head.weight"],
         "output_norm.weight": w["model.norm.weight"] + 1}
    for il in range(cfg.n_layer):
        p, b = f"model.layers.{il}.", f"blk.{il}."
        g[b + "attn_norm.weight"] = w[p + "input_layernorm.weight"] + 1
        g[b + "post_attention_norm.weight"] = w[p + "post_attention_layernorm.weight"] + 1
        if cfg.is_attention(il):
            a = p + "self_attn."
            for hf, gg in (("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"),
                           ("o_proj", "attn_output")):
                g[b + gg + ".weight"] = w[a + hf + ".weight"]
            g[b + "attn_q_norm.weight"] = w[a + "q_norm.weight"] + 1
            g[b + "attn_k_norm.weight"] = w[a + "k_norm.weight"] + 1
        else:
            a = p + "linear_attn."
            qkv = w[a + "in_proj_qkv.weight"]
            g[b + "attn_qkv.weight"] = np.concatenate([qkv[:2 * KD], tiled(qkv[2 * KD:], 0, cfg.dv)])
            g[b + "attn_gate.weight"] = tiled(w[a + "in_proj_z.weight"], 0, cfg.dv)
            g[b + "ssm_beta.weight"] = tiled(w[a + "in_proj_b.weight"], 0, 1)
            g[b + "ssm_alpha.weight"] = tiled(w[a + "in_proj_a.weight"], 0, 1)
            conv = w[a + "conv1d.weight"][:, 0, :]
            g[b + "ssm_conv1d.weight"] = np.concatenate([conv[:2 * KD], tiled(conv[2 * KD:], 0, cfg.dv)])
            g[b + "ssm_a"] = tiled(-np.exp(w[a + "A_log"]), 0, 1)
            g[b + "ssm_dt.bias"] = tiled(w[a + "dt_bias"], 0, 1)
            g[b + "ssm_norm.weight"] = w[a + "norm.weight"]
            g[b + "ssm_out.weight"] = tiled(w[a + "out_proj.weight"], 1, cfg.dv)
        g[b + "ffn_gate.weight"] = w[p + "mlp.gate_proj.weight"]
        g[b + "ffn_up.weight"] = w[p + "mlp.up_proj.weight"]
        g[b + "ffn_down.weight"] = w[p + "mlp.down_proj.weight"]
    return {k: np.ascontiguousarray(v, np.float32) for k, v in g.items()}


def nextn_tensors(cfg: Qwen35Config, rng) -> dict[str, np.ndarray]:
    """Random MTP blocks blk.{n_layer + i}: a full-attention layer and the nextn tensors."""
    E, g = cfg.n_embd, {}
    for i in range(cfg.n_nextn):
        b = f"blk.{cfg.n_layer + i}."
        shapes = {"attn_norm.weight": (E,), "post_attention_norm.weight": (E,),
                  "attn_q.weight": (2 * cfg.n_head * cfg.head_dim, E),
                  "attn_k.weight": (cfg.n_head_kv * cfg.head_dim, E),
                  "attn_v.weight": (cfg.n_head_kv * cfg.head_dim, E),
                  "attn_output.weight": (E, cfg.n_head * cfg.head_dim),
                  "attn_q_norm.weight": (cfg.head_dim,), "attn_k_norm.weight": (cfg.head_dim,),
                  "ffn_gate.weight": (cfg.n_ff, E), "ffn_up.weight": (cfg.n_ff, E),
                  "ffn_down.weight": (E, cfg.n_ff), "nextn.eh_proj.weight": (E, 2 * E),
                  "nextn.enorm.weight": (E,), "nextn.hnorm.weight": (E,),
                  "nextn.shared_head_norm.weight": (E,)}
        for name, shape in shapes.items():
            base = 1.0 if len(shape) == 1 else 0.0
            g[b + name] = (base + rng.standard_normal(shape) * 0.1).astype(np.float32)
    return g


def _vocab(w: GGUFWriter, n_vocab: int) -> None:
    """A SentencePiece-style vocab: <unk> <s> </s>, the 256 byte tokens, then words."""
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    toks += [f"\u2581w{i}" for i in range(n_vocab - len(toks))]
    types = [2, 3, 3] + [6] * 256 + [1] * (n_vocab - 259)
    w.add_tokenizer_model("llama")
    w.add_token_list(toks[:n_vocab])
    w.add_token_types(types[:n_vocab])
    w.add_token_scores([0.0] * n_vocab)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)


def write_gguf(path: str | Path, cfg: Qwen35Config, tensors: dict[str, np.ndarray],
               wtype: T = T.F32) -> Path:
    """Writes the tensors (matrices in wtype, vectors and conv taps in f32)."""
    w = GGUFWriter(str(path), "qwen35")
    w.add_block_count(cfg.n_layer + cfg.n_nextn)
    qwen35_metadata(w, cfg, n_ctx_train=4096)
    w.add_vocab_size(cfg.n_vocab)
    _vocab(w, cfg.n_vocab)
    write_weights(w, tensors, wtype, keep_f32=lambda name: "ssm_conv1d" in name)
    return Path(path)


def write_tiny_qwen35(path: str | Path, wtype: T = T.F32, seed: int | None = None,
                      **kw) -> Path:
    """A random qwen35 model at path; kw override Qwen35Config's fields."""
    cfg = Qwen35Config(**kw)
    rng = np.random.default_rng(seed)
    tensors = gguf_tensors(cfg, hf_weights(cfg, rng))
    tensors.update(nextn_tensors(cfg, rng))
    return write_gguf(path, cfg, tensors, wtype)


__all__ = ["Qwen35Config", "asdict", "gguf_tensors", "hf_weights", "write_gguf",
           "write_tiny_qwen35"]
