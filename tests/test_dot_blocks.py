"""The q4_0 weight dot's block order (native/src/quant/dot_blocks.c), bit for bit.

Per 32-block b: p_b = the exact integer dot of the codes (q4_0 codes - 8 against
the q8_0 activation codes), c[b % 8] = fma(f32(dx * dy), p_b, c[b % 8]) in f32,
result ((c0 + c4) + (c2 + c6)) + ((c1 + c5) + (c3 + c7)). Written here from that
definition, with an exactly rounded f32 fma (fractions), against the library's
vec_dot on fresh random blocks: the GPU kernels (mvx_blocks.cuh, mmb.cu) are
tested against the same library function.
"""
from __future__ import annotations

import os
from fractions import Fraction

import numpy as np
from gguf import GGMLQuantizationType as T

from pyllamakv.core.ffi import ffi, last_error, lib


def _f32_nearest(x: Fraction) -> np.float32:
    """x rounded to the nearest f32, ties to even (f32 has no overflow here)."""
    f = np.float32(float(x))
    best = f
    for g in (np.nextafter(f, np.float32(-np.inf)), np.nextafter(f, np.float32(np.inf))):
        dg, db = abs(Fraction(float(g)) - x), abs(Fraction(float(best)) - x)
        if dg < db or (dg == db and int(g.view(np.uint32)) % 2 == 0):
            best = g
    return np.float32(best)


def _fma32(a: np.float32, b: np.float32, c: np.float32) -> np.float32:
    return _f32_nearest(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))


def _block_order_dot(w: np.ndarray, y: np.ndarray) -> np.float32:
    wb = w.reshape(-1, 18)
    yb = y.reshape(-1, 34)
    c = [np.float32(0.0)] * 8
    for b in range(wb.shape[0]):
        dw = np.float32(wb[b, :2].view(np.float16)[0])
        qs = wb[b, 2:].astype(np.int32)
        codes = np.concatenate([qs & 15, qs >> 4]) - 8
        dy = np.float32(yb[b, :2].view(np.float16)[0])
        qy = yb[b, 2:].view(np.int8).astype(np.int32)
        p = int(np.dot(codes, qy))
        c[b % 8] = _fma32(np.float32(dw * dy), np.float32(p), c[b % 8])
    return ((c[0] + c[4]) + (c[2] + c[6])) + ((c[1] + c[5]) + (c[3] + c[7]))


def _c_q8_0(y: np.ndarray) -> np.ndarray:
    out = np.zeros(y.size // 32 * 34, np.uint8)
    st = lib.lkv_quantize(int(T.Q8_0), ffi.from_buffer("float[]", y), ffi.from_buffer(out), y.size)
    assert st == 0, last_error()
    return out


def _c_dot(w: np.ndarray, y: np.ndarray) -> np.float32:
    out = ffi.new("float *")
    st = lib.lkv_vec_dot(int(T.Q4_0), y.size, ffi.from_buffer(w), ffi.from_buffer("float[]", y), out)
    assert st == 0, last_error()
    return np.float32(out[0])


def test_q4_0_dot_is_block_order():
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    for trial in range(40):
        nb = int(rng.integers(1, 40))   # chains of unequal length, groups of 8 cut short
        w = rng.integers(0, 256, nb * 18, dtype=np.uint8)
        scales = (rng.standard_normal(nb) * 10.0 ** rng.uniform(-4, -1, nb)).astype(np.float16)
        w.reshape(-1, 18)[:, :2] = scales.view(np.uint8).reshape(-1, 2)
        y = (rng.standard_normal(nb * 32) * 10.0 ** rng.uniform(-2, 1)).astype(np.float32)
        want = _block_order_dot(w, _c_q8_0(y))
        got = _c_dot(w, y)
        assert got.view(np.uint32) == want.view(np.uint32), (
            f"trial {trial}, {nb} blocks: library {got!r}, block order {want!r}")
