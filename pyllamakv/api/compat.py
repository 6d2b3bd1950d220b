"""llama-cpp-python's keyword arguments that pyllamakv does not take by name.

Code written for llama-cpp-python passes many constructor and call arguments
routinely. Each one here is sorted into what it means for this engine:

- ``TUNING``: changes only how llama.cpp runs (threads, offload, NUMA, perf
  counters, ...). Accepted; a value other than llama-cpp-python's default is
  ignored with one warning per argument and process.
- ``UNSUPPORTED``: a feature pyllamakv lacks (LoRA, RPC, overrides, ...).
  The default value (None, False, 0, ...) is accepted silently; any other
  raises UnsupportedFeature naming the argument.

``TAKEN``: constructor arguments Llama handles itself, past its signature
(``tokenizer``: text.llama_tokenizer). An argument in none of these is a TypeError, as for any
Python function.
"""
from __future__ import annotations

import warnings
from typing import Any

from ..errors import UnsupportedError


class UnsupportedFeature(UnsupportedError):
    """A llama-cpp-python argument whose feature pyllamakv does not implement."""


# name -> llama-cpp-python's default
TUNING: dict[str, Any] = {
    "n_threads_batch": None, "split_mode": 1, "main_gpu": 0, "tensor_split": None,
    "last_n_tokens_size": 64, "offload_kqv": True, "op_offload": None, "swa_full": None,
    "no_perf": False, "numa": False, "rope_scaling_type": -1, "yarn_ext_factor": -1.0,
    "yarn_attn_factor": 1.0, "yarn_beta_fast": 32.0, "yarn_beta_slow": 1.0,
    "yarn_orig_ctx": 0, "mul_mat_q": True, "type_k_cache": None, "cache_type": None,
    "tfs_z": 1.0, "embd_normalize": 2,
}
UNSUPPORTED: dict[str, Any] = {
    "lora_base": None, "lora_path": None, "lora_scale": 1.0, "rpc_servers": None,
    "kv_overrides": None,
    "spm_infill": False, "rope_freq_base": 0.0, "rope_freq_scale": 0.0,
    "chat_template_kwargs": None,
}
TAKEN = frozenset({"tokenizer"})
_WHY = {
    "lora_path": "LoRA adapters are not implemented", "lora_base": "LoRA adapters are not "
    "implemented", "rpc_servers": "RPC offload is not implemented",
    "kv_overrides": "metadata overrides are not implemented",
    "rope_freq_base": "rope overrides are not implemented",
    "rope_freq_scale": "rope overrides are not implemented",
}
_warned: set[str] = set()


def _same(a: Any, b: Any) -> bool:
    try:
        return a is b or bool(a == b)
    except Exception:
        return False


def check_extra_kwargs(where: str, kwargs: dict[str, Any]) -> None:
    """Sort llama-cpp-python's extra keyword arguments of ``where`` (as above)."""
    for name, value in kwargs.items():
        if name in TAKEN and where == "Llama":
            continue
        if name in TUNING:
            if not _same(value, TUNING[name]) and name not in _warned:
                _warned.add(name)
                warnings.warn(f"{where}: {name}={value!r} only tunes llama.cpp and is ignored "
                              "by pyllamakv", stacklevel=3)
        elif name in UNSUPPORTED:
            if not _same(value, UNSUPPORTED[name]) and value is not None:
                raise UnsupportedFeature(
                    f"{where}: {name}={value!r} is not supported "
                    f"({_WHY.get(name, 'not implemented in pyllamakv')})")
        else:
            raise TypeError(f"{where}() got an unexpected keyword argument {name!r}")


def unsupported_attribute(name: str, what: str):
    """A module __getattr__ raising UnsupportedFeature for every public name."""
    def __getattr__(attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise UnsupportedFeature(f"{name}.{attr}: {what} is not part of pyllamakv")
    return __getattr__


def absent_module(name: str, what: str):
    """A stand-in for a llama_cpp module pyllamakv has no counterpart of: importing
    it works, every attribute raises UnsupportedFeature naming it."""
    import types

    class Absent(types.ModuleType):
        def __getattr__(self, attr: str):
            if attr.startswith("__"):
                raise AttributeError(attr)
            raise UnsupportedFeature(f"{name}.{attr}: {what} is not part of pyllamakv")
    return Absent(name, f"Not provided by pyllamakv: {what}.")
