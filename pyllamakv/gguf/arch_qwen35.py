"""The qwen35 (Qwen3.5 / Qwen3-Next style hybrid) part of the GGUF-to-core mapping.

A qwen35 GGUF (as llama.cpp's converter writes it) has ``block_count`` blocks,
the last ``nextn_predict_layers`` of which are MTP blocks; of the trunk, layer
i is gated full attention when (i + 1) % ``full_attention_interval`` == 0 and
a Gated DeltaNet layer otherwise. Only the attention layers have a KV cache.
The delta-rule sizes come from the ``ssm.*`` keys: ``group_count`` key heads
of ``state_size``, ``time_step_rank`` value heads, ``inner_size`` their width.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .reader import GGUFError, GGUFFile



def _int(f: GGUFFile, name: str, default: Any = None, lo: int = 1) -> int:
    """{arch}.name as an int in [lo, 2**31), else GGUFError naming the key (a
    float, a string or an array there was an OverflowError / ValueError naming
    nothing, and 2.7 was silently read as 2)."""
    v = f.arch_key(name, default)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise GGUFError(f"{f.path}: {f.architecture}.{name} must be an integer, got "
                        f"{type(v).__name__} {str(v)[:40]}")
    if not lo <= int(v) < 2**31:
        raise GGUFError(f"{f.path}: {f.architecture}.{name} = {v} is outside [{lo}, 2**31)")
    return int(v)


def qwen35_params(f: GGUFFile) -> dict[str, Any]:
    """The hybrid's fields of the core's model parameters (overriding n_layer)."""
    k = f.arch_key
    need = ("block_count", "full_attention_interval", "ssm.conv_kernel", "ssm.state_size",
            "ssm.group_count", "ssm.time_step_rank", "ssm.inner_size")
    missing = [f"{f.architecture}.{n}" for n in need if k(n) is None]
    if missing:
        raise GGUFError(f"{f.path}: {f.architecture} metadata lacks {', '.join(missing)}")
    n_v = _int(f, "ssm.time_step_rank")
    inner = _int(f, "ssm.inner_size")
    if inner % n_v:
        raise GGUFError(f"{f.path}: {f.architecture}.ssm.inner_size {inner} is not a multiple of "
                        f"ssm.time_step_rank {n_v}")
    n_nextn = _int(f, "nextn_predict_layers", 0, lo=0)
    n_layer = _int(f, "block_count") - n_nextn
    if n_layer <= 0:
        raise GGUFError(f"{f.path}: {f.architecture}.block_count leaves no trunk layer after "
                        f"{n_nextn} MTP blocks")
    return dict(
        n_layer=n_layer, n_nextn=n_nextn,
        full_attn_interval=_int(f, "full_attention_interval"),
        ssm_conv_kernel=_int(f, "ssm.conv_kernel"), ssm_n_k_heads=_int(f, "ssm.group_count"),
        ssm_n_v_heads=n_v, ssm_head_k_dim=_int(f, "ssm.state_size"),
        ssm_head_v_dim=inner // n_v)


def n_layer_kv(hparams: dict[str, Any]) -> int:
    """Layers with a KV cache: every layer, or a hybrid's full-attention layers."""
    interval = hparams.get("full_attn_interval", 0)
    return hparams["n_layer"] // interval if interval else hparams["n_layer"]


def recurrent_bytes(hparams: dict[str, Any]) -> int:
    """Bytes of one sequence's recurrent state (conv and delta-rule state, f32)."""
    interval = hparams.get("full_attn_interval", 0)
    if not interval:
        return 0
    n_rs = hparams["n_layer"] - n_layer_kv(hparams)
    vd = hparams["ssm_n_v_heads"] * hparams["ssm_head_v_dim"]
    conv_dim = 2 * hparams["ssm_n_k_heads"] * hparams["ssm_head_k_dim"] + vd
    per_layer = ((hparams["ssm_conv_kernel"] - 1) * conv_dim
                 + hparams["ssm_n_v_heads"] * hparams["ssm_head_k_dim"] * hparams["ssm_head_v_dim"])
    return 4 * per_layer * n_rs


def hybrid_lines(hparams: dict[str, Any]) -> list[str]:
    """``info``'s lines on a hybrid's layers (none for other models)."""
    if not hparams.get("full_attn_interval"):
        return []
    n_kv = n_layer_kv(hparams)
    return [
        f"KV layers:     {n_kv} of {hparams['n_layer']} (full attention, every "
        f"{hparams['full_attn_interval']}th); the KV cache, plan and ring cover only these",
        f"DeltaNet:      {hparams['n_layer'] - n_kv} layers, {hparams['ssm_n_k_heads']} key / "
        f"{hparams['ssm_n_v_heads']} value heads of {hparams['ssm_head_k_dim']}/"
        f"{hparams['ssm_head_v_dim']}, conv {hparams['ssm_conv_kernel']}; recurrent state "
        f"{recurrent_bytes(hparams) / 2**20:.1f} MiB per sequence",
        f"MTP blocks:    {hparams.get('n_nextn', 0)}",
    ]
