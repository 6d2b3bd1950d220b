"""Finite weights: NaN and inf in a model's tensors found at load, not mid-generation.

Only the exponent bits are read, with numpy, in place in the memory map:
an IEEE value is inf or NaN exactly when its exponent field is all ones.

- Vectors (norms, biases): always.
- Matrices, embeddings first (token_embd, output), then in file order, each
  if it fits in what is left of ``CHECK_BUDGET`` bytes (the default model:
  all of them):
  F32 / F16 / BF16 every element; quantized formats whose scales are plain
  f16 fields (Q4_0 .. Q8_0, Q2_K .. Q6_K, the IQ types, TQ1_0, TQ2_0) every
  block's scales (their codes are integers, so finite scales mean finite
  weights); IQ1_M keeps its one f16 scale in the high nibbles of bytes 49,
  51, 53, 55 (nibble k holds bits 4k..4k+3), so its exponent (bits 10-14) is
  bits 6-7 of byte 53 and bits 4-6 of byte 55.
- Not checked: matrices past the budget (reading them would page in a large
  file at load), and formats without f16 scales (MXFP4, NVFP4, Q1_0,
  Q8_1 / Q8_K, integer types).
"""
from __future__ import annotations

import numpy as np

from .reader import GGUFError, GGUFFile, TensorInfo
from .types import BF16, F16, F16_SCALE_FIELDS, F32, TENSOR_TYPES

IQ1_M = 29
CHECK_BUDGET = 512 << 20    # bytes of matrices examined per file
_CHUNK = 1 << 24            # bytes examined per numpy call (bounds the temporaries)


def _exponent_all_ones(hi: np.ndarray, mask: int) -> bool:
    """Any element of hi (the 16-bit half that holds the exponent) with all
    exponent bits set."""
    for i in range(0, len(hi), _CHUNK // 2):
        part = hi[i:i + _CHUNK // 2]
        if (np.bitwise_and(part, mask) == mask).any():
            return True
    return False


def nonfinite(t: TensorInfo) -> bool | None:
    """True if t holds a NaN or inf; False if it does not; None if not checked."""
    return raw_nonfinite(t.data, t.type)


def raw_nonfinite(raw: np.ndarray, type_id: int) -> bool | None:
    """The same for raw bytes (uint8) of whole rows of type type_id (a tensor's
    data, or the KV rows of a saved state)."""
    if type_id in (F32, F16, BF16):
        u16 = raw[:len(raw) // 2 * 2].view("<u2")
        if type_id == F32:
            return _exponent_all_ones(u16[1::2], 0x7F80)
        return _exponent_all_ones(u16, 0x7C00 if type_id == F16 else 0x7F80)
    if type_id == IQ1_M:
        blocks = raw.reshape(-1, TENSOR_TYPES[IQ1_M][2])
        for i in range(0, len(blocks), _CHUNK // 64):
            b = blocks[i:i + _CHUNK // 64]
            if (((b[:, 53] & 0xC0) == 0xC0) & ((b[:, 55] & 0x70) == 0x70)).any():
                return True
        return False
    fields = F16_SCALE_FIELDS.get(type_id)
    if fields is None:
        return None
    size = TENSOR_TYPES[type_id][2]
    blocks = raw.reshape(-1, size)
    # the high byte of a little-endian f16 holds its 5 exponent bits (mask 0x7C)
    return any(_exponent_all_ones(blocks[:, off + 1], 0x7C) for off in fields)


def _is_matrix(t: TensorInfo) -> bool:
    return sum(d > 1 for d in t.shape) > 1


def check_finite(f: GGUFFile, types=None, budget: int = CHECK_BUDGET) -> None:
    """GGUFError naming the first tensor found holding NaN or inf (see above
    for which are examined); types: only tensors of these type ids (None: all)."""
    first = ("token_embd.weight", "output.weight")
    order = sorted(f.tensors, key=lambda t: 0 if not _is_matrix(t) else 1 + (t.name not in first))
    for t in order:
        if types is not None and t.type not in types:
            continue
        if _is_matrix(t):
            if t.nbytes > budget:
                continue
            budget -= t.nbytes
        if nonfinite(t):
            kind = TENSOR_TYPES[t.type][0]
            what = "values" if t.type in (F32, F16, BF16) else "block scales"
            raise GGUFError(f"{f.path}: tensor {t.name!r} ({kind}) has NaN or infinite {what}")
