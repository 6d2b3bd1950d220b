"""The mixture-of-experts part of the GGUF-to-core mapping: ``qwen3moe`` and
``qwen35moe`` (keys and tensors as llama.cpp reads them).

Every layer's FFN is routed experts: ``ffn_gate_inp`` (the router, one row per
expert) and the experts stacked in 3-D tensors ``ffn_gate_exps`` /
``ffn_up_exps`` ([n_embd, n_ff_exp, n_expert]; or the two fused as
``ffn_gate_up_exps``, [n_embd, 2 n_ff_exp, n_expert]) and ``ffn_down_exps``
([n_ff_exp, n_embd, n_expert]); ``qwen35moe`` (the qwen35 hybrid layout) adds
a shared expert (``ffn_{gate,up,down}_shexp``) scaled by the sigmoid of
``ffn_gate_inp_shexp``. The router is a softmax, its top ``expert_used_count``
picks renormalised to sum 1 (llama.cpp does so for both architectures; a file
may say otherwise with ``expert_weights_norm``) and scaled by
``expert_weights_scale`` where the file has one. ``expert_feed_forward_length``
defaults to feed_forward_length / expert_used_count and
``expert_shared_feed_forward_length`` to feed_forward_length, as in llama.cpp;
``feed_forward_length`` itself is optional here (Qwen3.5 MoE has no dense
FFN). The core binds and checks every layer's tensors.
"""
from __future__ import annotations

import math
from typing import Any

from .reader import GGUFError, GGUFFile

MOE_ARCHS = ("qwen3moe", "qwen35moe")
# what each was checked against (info and the README say so)
CHECKED = {
    "qwen3moe": "tiny random models against HF transformers' Qwen3MoeForCausalLM "
                "(tests/test_moe_hf.py) and llama.cpp (tests/test_moe_golden.py); no real "
                "file yet",
    "qwen35moe": "tiny random models against HF transformers' Qwen3_5MoeForCausalLM "
                 "(tests/test_moe_hf.py) and llama.cpp (tests/test_moe_golden.py); no real "
                 "file yet",
}
MAX_EXPERTS, MAX_USED = 1024, 64   # the core's LKV_MOE_MAX_EXPERTS / LKV_MOE_MAX_USED


def _key(f: GGUFFile, suffix: str) -> str:
    return f"{f.architecture}.{suffix}"


def _int(f: GGUFFile, suffix: str, default: Any, lo: int, hi: int) -> int:
    v = f.arch_key(suffix, default)
    if v is None:
        raise GGUFError(f"{f.path}: metadata key {_key(f, suffix)!r} is missing")
    if isinstance(v, bool) or not isinstance(v, int):
        raise GGUFError(f"{f.path}: metadata key {_key(f, suffix)!r} must be an integer, "
                        f"not {v!r}")
    if not lo <= v <= hi:
        raise GGUFError(f"{f.path}: metadata key {_key(f, suffix)!r} = {v} is out of range "
                        f"[{lo}, {hi}]")
    return v


def moe_params(f: GGUFFile, hp: dict[str, Any]) -> dict[str, Any]:
    """The experts' fields of the core's model parameters (hp: the common ones,
    n_ff 0 where the file has no feed_forward_length)."""
    n_expert = _int(f, "expert_count", None, 1, MAX_EXPERTS)
    n_used = _int(f, "expert_used_count", None, 1, min(n_expert, MAX_USED))
    n_ff = hp["n_ff"]
    n_ff_exp = _int(f, "expert_feed_forward_length", n_ff // n_used or None, 1, 2**31 - 1)
    n_ff_shexp = 0
    if f.architecture == "qwen35moe":
        n_ff_shexp = _int(f, "expert_shared_feed_forward_length", n_ff or None, 1, 2**31 - 1)
    norm = f.arch_key("expert_weights_norm", True)
    if not isinstance(norm, bool):
        raise GGUFError(f"{f.path}: metadata key {_key(f, 'expert_weights_norm')!r} must be a "
                        f"bool, not {norm!r}")
    scale = f.arch_key("expert_weights_scale", 0.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or \
            not (math.isfinite(scale) and 0 <= scale < 1e30):
        raise GGUFError(f"{f.path}: metadata key {_key(f, 'expert_weights_scale')!r} must be a "
                        f"finite number >= 0, not {scale!r}")
    return dict(n_expert=n_expert, n_expert_used=n_used, n_ff_exp=n_ff_exp,
                n_ff_shexp=n_ff_shexp, expert_weights_norm=int(norm),
                expert_weights_scale=float(scale),
                n_ff=max(n_ff, n_ff_exp, n_ff_shexp))   # the core's buffers: the widest FFN


_EXPERTS = ("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight",
            "ffn_gate_up_exps.weight")


def host_expert(name: str, n_cpu_moe: int, n_layer: int) -> bool:
    """Whether tensor `name` is a routed expert tensor of one of the first n_cpu_moe
    trunk layers (of n_layer), which the core keeps in host memory (not on a device;
    an MTP block's experts go with the other weights)."""
    parts = name.split(".", 2)
    return (len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit()
            and int(parts[1]) < min(n_cpu_moe, n_layer) and parts[2] in _EXPERTS)


def moe_lines(hparams: dict[str, Any], arch: str = "") -> list[str]:
    """``info``'s lines on a mixture-of-experts model of arch (none for other models)."""
    if not hparams.get("n_expert"):
        return []
    shared = (f"; a shared expert of {hparams['n_ff_shexp']} behind a sigmoid gate"
              if hparams.get("n_ff_shexp") else "")
    norm = "renormalised" if hparams.get("expert_weights_norm") else "not renormalised"
    return [f"Experts:       {hparams['n_expert_used']} of {hparams['n_expert']} per token "
            f"(softmax router, top-k weights {norm}), expert FFN {hparams['n_ff_exp']}"
            f"{shared}; every layer"] + (
        [f"Checked:       {CHECKED[arch]}"] if arch in CHECKED else [])
