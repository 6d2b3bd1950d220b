"""The gemma3 part of the GGUF-to-core mapping (keys as llama.cpp reads them).

A gemma3 GGUF as llama.cpp's converter writes it: the usual llama-style
tensors plus per-head ``attn_q_norm`` / ``attn_k_norm`` and the norms on the
attention and FFN outputs (``post_attention_norm``, ``post_ffw_norm``); every
norm weight is stored with gemma's ``1 +`` already added, so the core applies
them as plain RMS-norm weights. With ``attention.sliding_window`` set, layer i
is local (that window, rope base ``rope.freq_base_swa``, default 10000, scale
1) unless (i + 1) % ``attention.sliding_window_pattern`` (default 6) == 0,
and global otherwise (``rope.freq_base``, its linear scaling if any). The
query scale is 1/sqrt(key_length), 1/sqrt(n_embd / n_head) for the 62-layer
(27B) model, as llama.cpp has it; ``final_logit_softcapping`` if present.
"""
from __future__ import annotations

from typing import Any

from .reader import GGUFError, GGUFFile

ARCH = "gemma3"
SWA_PATTERN = 6          # llama.cpp's default when the file has no pattern key
ROPE_BASE_SWA = 10000.0  # llama.cpp's default local rope base


def _positive(f: GGUFFile, suffix: str, default: Any, kind: type) -> Any:
    v = f.arch_key(suffix, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and
                                                                  not isinstance(v, int)):
        raise GGUFError(f"{f.path}: metadata key '{ARCH}.{suffix}' must be a {kind.__name__}, "
                        f"not {v!r}")
    if not 0 <= v < 2**31 or v != v:
        raise GGUFError(f"{f.path}: metadata key '{ARCH}.{suffix}' = {v} is out of range")
    return kind(v)


def gemma3_params(f: GGUFFile, hp: dict[str, Any]) -> dict[str, Any]:
    """gemma3's fields of the core's model parameters (hp: the common ones)."""
    if isinstance(f.arch_key("attention.sliding_window_pattern"), list):
        raise GGUFError(f"{f.path}: a per-layer {ARCH}.attention.sliding_window_pattern "
                        "(a list) is not supported; only its integer form")
    window = _positive(f, "attention.sliding_window", 0, int)
    out: dict[str, Any] = dict(swa_window=window)
    if window:
        out["swa_pattern"] = _positive(f, "attention.sliding_window_pattern", SWA_PATTERN, int)
        base = _positive(f, "rope.freq_base_swa", ROPE_BASE_SWA, float)
        if not base > 0:
            raise GGUFError(f"{f.path}: metadata key '{ARCH}.rope.freq_base_swa' must be > 0")
        out["rope_freq_base_swa"] = base
    scale_dim = hp["head_dim"]
    if hp["n_layer"] == 62:                       # 27B: query_pre_attn_scalar = n_embd / n_head
        scale_dim = hp["n_embd"] // hp["n_head"]
    out["attn_scale"] = scale_dim ** -0.5
    out["logit_softcap"] = _positive(f, "final_logit_softcapping", 0.0, float)
    return out


def layer_tensors(hp: dict) -> dict[str, tuple[int, ...]]:
    E, hd = hp["n_embd"], hp["head_dim"]
    return {"attn_q_norm.weight": (hd,), "attn_k_norm.weight": (hd,),
            "post_attention_norm.weight": (E,), "post_ffw_norm.weight": (E,)}


def swa_layers(hparams: dict[str, Any]) -> list[bool]:
    """Per layer: True where it is local (sliding window)."""
    window, pattern = hparams.get("swa_window", 0), hparams.get("swa_pattern", 0)
    return [bool(window) and (pattern == 0 or (i + 1) % pattern != 0)
            for i in range(hparams["n_layer"])]


def n_layer_local(hparams: dict[str, Any]) -> int:
    """Local layers: with a pool bound they keep a ring of window - 1 + n_batch rows
    beside it; the planner and the transfer ring cover only the others."""
    return sum(swa_layers(hparams))


def swa_lines(hparams: dict[str, Any]) -> list[str]:
    """``info``'s lines on a sliding-window model's layers (none for other models)."""
    if not hparams.get("swa_window"):
        return []
    n_local = n_layer_local(hparams)
    return [f"Sliding window: {n_local} of {hparams['n_layer']} layers local (window "
            f"{hparams['swa_window']}, rope base {hparams['rope_freq_base_swa']:g}), "
            f"{hparams['n_layer'] - n_local} global (rope base {hparams['rope_freq_base']:g}); "
            "a local layer's attention reads only its window; with a pool bound the local "
            "layers keep a ring of window - 1 + n_batch rows beside it and the plan and "
            "the transfer ring cover only the global layers"]
