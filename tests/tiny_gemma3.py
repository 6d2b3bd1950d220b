"""Tiny random gemma3 models.

Weights are drawn in Hugging Face's convention (``Gemma3ForCausalLM`` state
dict names), turned into GGUF tensors the way llama.cpp's converter does
(every RMS-norm weight, q/k norms included, stored as 1 + w; projections as
they are; the output tied to the embedding) and written with
gguf.GGUFWriter with the keys llama.cpp reads. The HF test loads the same HF
weights into transformers; the other tests read the GGUF.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter

from tiny_models import write_weights


@dataclass
class Gemma3Config:
    n_vocab: int = 320
    n_embd: int = 128
    n_layer: int = 6
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 64
    n_ff: int = 256
    window: int = 24           # sliding window of the local layers
    pattern: int = 3           # layer i is global when (i + 1) % pattern == 0
    rope_base: float = 1e6     # global layers
    rope_base_swa: float = 1e4 # local layers
    eps: float = 1e-6
    softcap: float = 0.0       # final logit softcapping (0: none, as gemma3)

    def is_local(self, il: int) -> bool:
        return (il + 1) % self.pattern != 0


def hf_weights(cfg: Gemma3Config, rng) -> dict[str, np.ndarray]:
    """A random HF state dict (float32), Gemma3ForCausalLM names (tied output)."""
    E, F, hd = cfg.n_embd, cfg.n_ff, cfg.head_dim
    w: dict[str, np.ndarray] = {}

    def mat(name, rows, cols, scale=None):
        s = 1.0 / np.sqrt(cols) if scale is None else scale
        w[name] = (rng.standard_normal((rows, cols)) * s).astype(np.float32)

    def vec(name, n, spread=0.3):   # gemma norms: x * (1 + w), w near 0
        w[name] = (spread * rng.standard_normal(n)).astype(np.float32)

    # embeddings are scaled by sqrt(n_embd): draw them at 1/sqrt(n_embd)
    mat("model.embed_tokens.weight", cfg.n_vocab, E, 1.0 / np.sqrt(E))
    vec("model.norm.weight", E)
    for il in range(cfg.n_layer):
        p = f"model.layers.{il}."
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm"):
            vec(p + n + ".weight", E)
        a = p + "self_attn."
        mat(a + "q_proj.weight", cfg.n_head * hd, E)
        mat(a + "k_proj.weight", cfg.n_head_kv * hd, E)
        mat(a + "v_proj.weight", cfg.n_head_kv * hd, E)
        mat(a + "o_proj.weight", E, cfg.n_head * hd)
        vec(a + "q_norm.weight", hd)
        vec(a + "k_norm.weight", hd)
        mat(p + "mlp.gate_proj.weight", F, E)
        mat(p + "mlp.up_proj.weight", F, E)
        mat(p + "mlp.down_proj.weight", E, F)
    return w


_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "post_attention_norm",
          "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm",
          "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
          "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
          "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
          "mlp.down_proj": "ffn_down"}


def gguf_tensors(cfg: Gemma3Config, w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The GGUF tensors (numpy row-major, float32) that the converter makes of w."""
    g = {"token_embd.weight": w["model.embed_tokens.weight"],
         "output_norm.weight": w["model.norm.weight"] + 1}
    for il in range(cfg.n_layer):
        for hf, gg in _NAMES.items():
            x = w[f"model.layers.{il}.{hf}.weight"]
            g[f"blk.{il}.{gg}.weight"] = x + 1 if gg.endswith("norm") else x
    return {k: np.ascontiguousarray(v, np.float32) for k, v in g.items()}


def write_gguf(path: str | Path, cfg: Gemma3Config, tensors: dict[str, np.ndarray],
               wtype: T = T.F32) -> Path:
    """Writes the tensors (matrices in wtype, vectors in f32) with gemma3's keys."""
    w = GGUFWriter(str(path), "gemma3")
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
    w.add_sliding_window(cfg.window)
    w.add_uint32("gemma3.attention.sliding_window_pattern", cfg.pattern)
    w.add_float32("gemma3.rope.freq_base_swa", cfg.rope_base_swa)
    if cfg.softcap:
        w.add_final_logit_softcapping(cfg.softcap)
    w.add_vocab_size(cfg.n_vocab)
    toks = ["<pad>", "<eos>", "<bos>", "<unk>"] + [f"<0x{i:02X}>" for i in range(256)]
    toks += [f"\u2581w{i}" for i in range(cfg.n_vocab - len(toks))]
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_types([3, 3, 3, 2] + [6] * 256 + [1] * (cfg.n_vocab - 260))
    w.add_token_scores([0.0] * cfg.n_vocab)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    write_weights(w, tensors, wtype)
    return Path(path)


def write_tiny_gemma3(path: str | Path, wtype: T = T.F32, seed: int | None = None,
                      **kw) -> Path:
    """A random gemma3 model at path; kw override Gemma3Config's fields."""
    cfg = Gemma3Config(**kw)
    return write_gguf(path, cfg, gguf_tensors(cfg, hf_weights(cfg, np.random.default_rng(seed))),
                      wtype)
