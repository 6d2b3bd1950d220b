"""Hyper-parameters: the core's model parameters read from GGUF metadata.

``model_params`` maps a file's ``{arch}.*`` keys to the fields of the core's
``lkv_model_params``. ``ARCHS`` names the architectures the core runs and the
core's id for each.
"""
from __future__ import annotations

from typing import Any

from .gguf_file import GGUFError, GGUFFile

ARCHS = {"llama": 0, "mistral": 0, "qwen2": 1, "qwen3": 2}


def model_params(f: GGUFFile) -> dict[str, Any]:
    """The core's model parameters read from GGUF metadata, as a dict."""
    arch = f.architecture
    if arch not in ARCHS:
        raise GGUFError(f"{f.path}: unsupported architecture {arch!r}; supported: "
                        f"{', '.join(sorted(ARCHS))}")
    k = f.arch_key
    n_embd = k("embedding_length")
    n_head = k("attention.head_count")
    if n_embd is None or n_head is None or k("block_count") is None:
        raise GGUFError(f"{f.path}: metadata lacks {arch}.embedding_length, block_count or "
                        "attention.head_count")
    if isinstance(n_head, list):
        raise GGUFError(f"{f.path}: per-layer head counts are not supported")
    head_dim = k("attention.key_length", n_embd // n_head)
    tokens = f.get("tokenizer.ggml.tokens")
    embd = next((t for t in f.tensors if t.name == "token_embd.weight"), None)
    n_vocab = k("vocab_size") or (len(tokens) if tokens else None) or (embd.shape[1] if embd else 0)
    scale = 1.0
    if k("rope.scaling.type") == "linear" and k("rope.scaling.factor"):
        scale = 1.0 / float(k("rope.scaling.factor"))
    return dict(
        arch=ARCHS[arch], n_vocab=int(n_vocab), n_embd=int(n_embd),
        n_layer=int(k("block_count")), n_head=int(n_head),
        n_head_kv=int(k("attention.head_count_kv", n_head)), head_dim=int(head_dim),
        n_ff=int(k("feed_forward_length", 0)), n_ctx_train=int(k("context_length", 0)),
        rope_dim=int(k("rope.dimension_count", head_dim)),
        rms_eps=float(k("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_freq_base=float(k("rope.freq_base", 10000.0)), rope_freq_scale=scale)
