"""llama_cpp.llama_cpp's names: llama.cpp's constants and the few functions that
make sense without llama.cpp's C API.

The constants keep llama.cpp's values, so code that compares or passes them
(``pooling_type=LLAMA_POOLING_TYPE_MEAN``, ``type_k=GGML_TYPE_Q8_0``) works
unchanged. Every other ``llama_*`` function of llama.cpp's C API (the ctypes
layer of llama-cpp-python: ``llama_decode``, ``llama_batch_init``, ...) resolves
to a stand-in that raises ``UnsupportedFeature`` naming it when called: pyllamakv
has its own core (native/) and no llama.cpp handles to pass.
"""
from __future__ import annotations

import os
import platform

from .api.compat import UnsupportedFeature

# ggml tensor types (ggml.h)
GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1 = 0, 1, 2, 3
GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q8_1 = 6, 7, 8, 9
GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K = 10, 11, 12, 13
GGML_TYPE_Q6_K, GGML_TYPE_Q8_K = 14, 15
GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ3_XXS, GGML_TYPE_IQ1_S = 16, 17, 18, 19
GGML_TYPE_IQ4_NL, GGML_TYPE_IQ3_S, GGML_TYPE_IQ2_S, GGML_TYPE_IQ4_XS = 20, 21, 22, 23
GGML_TYPE_I8, GGML_TYPE_I16, GGML_TYPE_I32, GGML_TYPE_I64 = 24, 25, 26, 27
GGML_TYPE_F64, GGML_TYPE_IQ1_M, GGML_TYPE_BF16 = 28, 29, 30

LLAMA_DEFAULT_SEED = 0xFFFFFFFF
LLAMA_TOKEN_NULL = -1
LLAMA_MAX_DEVICES = 1

LLAMA_VOCAB_TYPE_NONE, LLAMA_VOCAB_TYPE_SPM, LLAMA_VOCAB_TYPE_BPE = 0, 1, 2
LLAMA_VOCAB_TYPE_WPM, LLAMA_VOCAB_TYPE_UGM, LLAMA_VOCAB_TYPE_RWKV = 3, 4, 5

LLAMA_ROPE_TYPE_NONE, LLAMA_ROPE_TYPE_NORM, LLAMA_ROPE_TYPE_NEOX = -1, 0, 2

LLAMA_TOKEN_TYPE_UNDEFINED, LLAMA_TOKEN_TYPE_NORMAL, LLAMA_TOKEN_TYPE_UNKNOWN = 0, 1, 2
LLAMA_TOKEN_TYPE_CONTROL, LLAMA_TOKEN_TYPE_USER_DEFINED = 3, 4
LLAMA_TOKEN_TYPE_UNUSED, LLAMA_TOKEN_TYPE_BYTE = 5, 6

LLAMA_FTYPE_ALL_F32, LLAMA_FTYPE_MOSTLY_F16 = 0, 1
LLAMA_FTYPE_MOSTLY_Q4_0, LLAMA_FTYPE_MOSTLY_Q4_1, LLAMA_FTYPE_MOSTLY_Q8_0 = 2, 3, 7
LLAMA_FTYPE_MOSTLY_Q5_0, LLAMA_FTYPE_MOSTLY_Q5_1, LLAMA_FTYPE_MOSTLY_Q2_K = 8, 9, 10
LLAMA_FTYPE_MOSTLY_Q4_K_S, LLAMA_FTYPE_MOSTLY_Q4_K_M = 14, 15
LLAMA_FTYPE_MOSTLY_Q5_K_S, LLAMA_FTYPE_MOSTLY_Q5_K_M, LLAMA_FTYPE_MOSTLY_Q6_K = 16, 17, 18
LLAMA_FTYPE_MOSTLY_BF16 = 32
LLAMA_FTYPE_GUESSED = 1024

LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED, LLAMA_ROPE_SCALING_TYPE_NONE = -1, 0
LLAMA_ROPE_SCALING_TYPE_LINEAR, LLAMA_ROPE_SCALING_TYPE_YARN = 1, 2
LLAMA_ROPE_SCALING_TYPE_LONGROPE = 3
LLAMA_ROPE_SCALING_TYPE_MAX_VALUE = LLAMA_ROPE_SCALING_TYPE_LONGROPE

LLAMA_POOLING_TYPE_UNSPECIFIED, LLAMA_POOLING_TYPE_NONE, LLAMA_POOLING_TYPE_MEAN = -1, 0, 1
LLAMA_POOLING_TYPE_CLS, LLAMA_POOLING_TYPE_LAST, LLAMA_POOLING_TYPE_RANK = 2, 3, 4

LLAMA_ATTENTION_TYPE_UNSPECIFIED, LLAMA_ATTENTION_TYPE_CAUSAL = -1, 0
LLAMA_ATTENTION_TYPE_NON_CAUSAL = 1

LLAMA_FLASH_ATTN_TYPE_AUTO, LLAMA_FLASH_ATTN_TYPE_DISABLED = -1, 0
LLAMA_FLASH_ATTN_TYPE_ENABLED = 1

LLAMA_SPLIT_MODE_NONE, LLAMA_SPLIT_MODE_LAYER, LLAMA_SPLIT_MODE_ROW = 0, 1, 2

LLAMA_LOAD_MODE_AUTO, LLAMA_LOAD_MODE_NONE, LLAMA_LOAD_MODE_MMAP = -1, 0, 1
LLAMA_LOAD_MODE_MLOCK, LLAMA_LOAD_MODE_MMAP_MLOCK = 2, 3

LLAMA_KV_OVERRIDE_TYPE_INT, LLAMA_KV_OVERRIDE_TYPE_FLOAT = 0, 1
LLAMA_KV_OVERRIDE_TYPE_BOOL, LLAMA_KV_OVERRIDE_TYPE_STR = 2, 3


# ---------------------------------------------------------------- what pyllamakv can answer

def llama_supports_gpu_offload() -> bool:
    """True when the core was built with CUDA and a device is present."""
    from .core.native import cuda_device_count
    return cuda_device_count() > 0


def llama_supports_mmap() -> bool:
    return True      # GGUF tensors are read memory-mapped (gguf/reader.py)


def llama_supports_mlock() -> bool:
    return False     # use_mlock is accepted and has no effect


def llama_max_devices() -> int:
    return LLAMA_MAX_DEVICES


def llama_print_system_info() -> bytes:
    """A one-line description of the machine and the core, as bytes (llama.cpp's type)."""
    from .core.native import cuda_device_count
    n_cuda = cuda_device_count()
    return (f"pyllamakv | {platform.machine()} | CPU threads = {os.cpu_count()} | "
            f"CUDA devices = {n_cuda}").encode()


def llama_backend_init(numa: bool = False) -> None:
    """Nothing to initialise: the core loads with the first Llama."""


def llama_backend_free() -> None:
    """Nothing to free: handles are freed by Llama.close()."""


# ---------------------------------------------------------------- the rest of the C API

def _unsupported(name: str):
    def call(*args, **kwargs):
        raise UnsupportedFeature(
            f"llama_cpp.{name}: llama.cpp's low-level C API is not part of pyllamakv "
            "(use pyllamakv.Llama)")
    call.__name__ = call.__qualname__ = name
    return call


def __getattr__(name: str):
    if name.startswith(("llama_", "ggml_", "llava_", "mtmd_")):
        return _unsupported(name)
    raise AttributeError(f"module 'pyllamakv.llama_cpp' has no attribute {name!r}")
