"""k-quant blocks (q2_K .. q6_K) made from float weights, for test models.

The library reads k-quants but does not write them (models arrive quantized),
and gguf.quants only dequantizes them. Tests used to fill such tensors with
random blocks, whose weights follow no distribution a real model has (random
6- and 8-bit sub-block scales make some far larger than others). This writes
the blocks from weights instead, by the plainest rule per 16- or 32-element
sub-block (its range over the code range, the sub-block scales then coded
against the block's f16 scale), in ggml's byte layouts (quant/blocks.h); not
llama.cpp's error-minimising search, so the error is somewhat larger than a
real file's, but the values are the weights'. tests/test_kquant_blocks.py
checks the layouts against gguf.quants.dequantize.
"""
from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

QK = 256
BYTES = {n: GGML_QUANT_SIZES[T[n.upper()]][1] for n in ("q2_k", "q3_k", "q4_k", "q5_k", "q6_k")}


def _f16(v: np.ndarray) -> np.ndarray:
    return v.astype(np.float16)


def _code(x: np.ndarray, scale: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """round(x / scale) clipped to [lo, hi]; 0 where the scale is 0"""
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(scale != 0, np.rint(x / scale), 0)
    return np.clip(q, lo, hi).astype(np.int32)


def _super_scale(sub: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray]:
    """the block's f16 scale d for sub-block scales sub (nb, ns), and their codes
    round(sub / d) in [-top - 1, top] (sub >= 0 gives [0, top])"""
    d = _f16(np.abs(sub).max(1) / top).astype(np.float32)
    return d, _code(sub, d[:, None], -top - 1, top)


def _symmetric(s: np.ndarray, div: float, lo: int, hi: int, top: int):
    """sub-blocks s (nb, ns, n) coded as d * sc * q: each sub-block's scale its
    largest magnitude / div, coded against d as sc in [-top - 1, top], q in
    [lo, hi]; returns d, sc and q (nb, ns * n)"""
    d, sc = _super_scale(np.abs(s).max(2) / div, top)
    return d, sc, _code(s, (d[:, None] * sc)[..., None], lo, hi).reshape(len(s), -1)


def _with_mins(s: np.ndarray, hi: int, top: int):
    """sub-blocks s (nb, ns, n) coded as d * sc * q - dmin * m: each sub-block's
    offset m the negated minimum (if below 0), its scale the range / hi, sc and m
    coded against d and dmin in [0, top], q in [0, hi]; returns d, sc, dmin, m
    and q (nb, ns, n)"""
    mn = np.maximum(-s.min(2), 0)
    d, sc = _super_scale((s.max(2) + mn) / hi, top)
    dmin, m = _super_scale(mn, top)
    q = _code(s + (dmin[:, None] * m)[..., None], (d[:, None] * sc)[..., None], 0, hi)
    return d, sc, dmin, m, q


def _pack_2bit(q: np.ndarray) -> np.ndarray:
    """the 64 bytes holding the low 2 bits of 256 values each (q2_K / q3_K's
    qs): value i = 128 h + 32 s + l at bits 2 s of byte 32 h + l"""
    q = (q & 3).reshape(len(q), 2, 4, 32)
    return (q[:, :, 0] | q[:, :, 1] << 2 | q[:, :, 2] << 4 | q[:, :, 3] << 6).reshape(len(q), 64)


def _q6_k(x: np.ndarray) -> np.ndarray:
    nb = len(x)
    d, sc, q = _symmetric(x.reshape(nb, 16, 16), 31, -32, 31, 127)
    q = q + 32
    out = np.zeros((nb, 210), np.uint8)
    for h in range(2):                         # halves of 128: ql 64 bytes, qh 32 bytes
        e = q[:, 128 * h:128 * h + 128].reshape(nb, 4, 32)   # the 4 runs of 32 of the half
        ql = np.zeros((nb, 64), np.int32)
        ql[:, :32] = (e[:, 0] & 15) | (e[:, 2] & 15) << 4
        ql[:, 32:] = (e[:, 1] & 15) | (e[:, 3] & 15) << 4
        qh = (e[:, 0] >> 4) | (e[:, 1] >> 4) << 2 | (e[:, 2] >> 4) << 4 | (e[:, 3] >> 4) << 6
        out[:, 64 * h:64 * h + 64] = ql
        out[:, 128 + 32 * h:160 + 32 * h] = qh
    out[:, 192:208] = sc.astype(np.int8).view(np.uint8)
    out[:, 208:210] = _f16(d).view(np.uint8).reshape(nb, 2)
    return out


def _q3_k(x: np.ndarray) -> np.ndarray:
    nb = len(x)
    d, sc, q = _symmetric(x.reshape(nb, 16, 16), 4, -4, 3, 31)
    q = q + 4                                   # 0..7
    out = np.zeros((nb, 110), np.uint8)
    high = (q >> 2).reshape(nb, 8, 32)          # value 32 k + l: bit k of hmask byte l
    out[:, :32] = sum(high[:, k] << k for k in range(8))
    out[:, 32:96] = _pack_2bit(q)
    u = sc + 32                                 # 6-bit codes of the 16 scales
    packed = np.zeros((nb, 12), np.int32)
    for k in range(16):
        lo, hi = u[:, k] & 15, u[:, k] >> 4
        packed[:, k if k < 8 else k - 8] |= lo if k < 8 else lo << 4
        packed[:, 8 + (k & 3)] |= hi << 2 * (k >> 2)
    out[:, 96:108] = packed
    out[:, 108:110] = _f16(d).view(np.uint8).reshape(nb, 2)
    return out


def _q2_k(x: np.ndarray) -> np.ndarray:
    nb = len(x)
    d, sc, dmin, m, q = _with_mins(x.reshape(nb, 16, 16), 3, 15)
    q = q.reshape(nb, 256)
    out = np.zeros((nb, 84), np.uint8)
    out[:, :16] = sc | m << 4
    out[:, 16:80] = _pack_2bit(q)
    out[:, 80:82] = _f16(d).view(np.uint8).reshape(nb, 2)
    out[:, 82:84] = _f16(dmin).view(np.uint8).reshape(nb, 2)
    return out


def _scales_k4(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """the 12 bytes holding eight 6-bit scales and mins (q4_K, q5_K)"""
    p = np.zeros((len(sc), 12), np.int32)
    for j in range(8):
        if j < 4:
            p[:, j] |= sc[:, j]
            p[:, j + 4] |= m[:, j]
        else:
            p[:, j + 4] |= (sc[:, j] & 15) | (m[:, j] & 15) << 4
            p[:, j - 4] |= (sc[:, j] >> 4) << 6
            p[:, j] |= (m[:, j] >> 4) << 6
    return p


def _q45_k(x: np.ndarray, bits: int) -> np.ndarray:
    nb = len(x)
    d, sc, dmin, m, q = _with_mins(x.reshape(nb, 8, 32), (1 << bits) - 1, 63)   # q (nb, 8, 32)
    out = np.zeros((nb, BYTES[f"q{bits}_k"]), np.uint8)
    out[:, 0:2] = _f16(d).view(np.uint8).reshape(nb, 2)
    out[:, 2:4] = _f16(dmin).view(np.uint8).reshape(nb, 2)
    out[:, 4:16] = _scales_k4(sc, m)
    qs = np.concatenate([(q[:, 2 * p] & 15) | (q[:, 2 * p + 1] & 15) << 4 for p in range(4)], axis=1)
    if bits == 4:
        out[:, 16:144] = qs
    else:
        qh = np.zeros((nb, 32), np.int32)
        for j in range(8):
            qh |= (q[:, j] >> 4) << j
        out[:, 16:48] = qh
        out[:, 48:176] = qs
    return out


def quantize(x: np.ndarray, type_name: str) -> np.ndarray:
    """the blocks of float weights x (rows, cols; cols a multiple of 256) in
    k-quant type_name ("q2_k" .. "q6_k"), as the GGUF byte layout (flat uint8)"""
    x = np.asarray(x, np.float32)
    if x.shape[-1] % QK:
        raise ValueError(f"{type_name}: rows of {x.shape[-1]} elements, not a multiple of {QK}")
    blocks = x.reshape(-1, QK)
    fn = {"q2_k": _q2_k, "q3_k": _q3_k, "q6_k": _q6_k,
          "q4_k": lambda b: _q45_k(b, 4), "q5_k": lambda b: _q45_k(b, 5)}[type_name]
    return fn(blocks).reshape(-1)
