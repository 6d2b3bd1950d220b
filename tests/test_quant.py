"""Block formats and dot products of the C core against gguf.quants.

Every run draws fresh random data. The seed is printed in each assertion
message; set PYLLAMAKV_TEST_SEED to that number to replay a failure.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf import quants

from pyllamakv.core.ffi import ffi, last_error, lib

SEED = int(os.environ.get("PYLLAMAKV_TEST_SEED", np.random.SeedSequence().entropy))

WEIGHT_TYPES = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
                T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL]
KV_TYPES = [T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.IQ4_NL]
ACT_TYPES = [T.Q8_1, T.Q8_K]
VEC_DOT_TYPE = {T.F32: T.F32, T.F16: T.F16, T.BF16: T.BF16, T.Q4_0: T.Q8_0, T.Q5_0: T.Q8_0,
                T.Q8_0: T.Q8_0, T.IQ4_NL: T.Q8_0, T.Q4_1: T.Q8_1, T.Q5_1: T.Q8_1,
                T.Q2_K: T.Q8_K, T.Q3_K: T.Q8_K, T.Q4_K: T.Q8_K, T.Q5_K: T.Q8_K, T.Q6_K: T.Q8_K}
# Byte offsets of the f16 scale fields inside each block (the rest is codes).
F16_FIELDS = {T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
              T.IQ4_NL: [0], T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2],
              T.Q6_K: [208]}


def rng_for(*tag: int) -> np.random.Generator:
    return np.random.default_rng([SEED, *tag])


def why(t: T, extra: str = "") -> str:
    return f"type {t.name}, seed {SEED} (PYLLAMAKV_TEST_SEED={SEED} replays) {extra}"


# ---------------------------------------------------------------- C calls

def fbuf(a: np.ndarray):
    """A float32 array as `float *` (no copy)."""
    assert a.dtype == np.float32 and a.flags.c_contiguous
    return ffi.from_buffer("float[]", a)


def c_dequantize(t: T, raw: np.ndarray, n: int) -> np.ndarray:
    out = np.empty(n, np.float32)
    st = lib.lkv_dequantize(int(t), ffi.from_buffer(raw), fbuf(out), n)
    assert st == 0, last_error()
    return out


def c_quantize(t: T, x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, np.float32)
    out = np.zeros(lib.lkv_row_bytes(int(t), x.size), np.uint8)
    st = lib.lkv_quantize(int(t), fbuf(x), ffi.from_buffer(out), x.size)
    assert st == 0, last_error()
    return out


def c_vec_dot(t: T, raw: np.ndarray, y: np.ndarray) -> float:
    out = ffi.new("float *")
    st = lib.lkv_vec_dot(int(t), y.size, ffi.from_buffer(raw), fbuf(y), out)
    assert st == 0, last_error()
    return float(out[0])


# ---------------------------------------------------------------- random data

def random_f16(rng: np.random.Generator, k: int) -> np.ndarray:
    """Finite f16 values spanning several decades, both signs, some subnormal."""
    v = rng.standard_normal(k) * 10.0 ** rng.uniform(-7, 0, k)
    return v.astype(np.float16)


def random_blocks(t: T, n: int, rng: np.random.Generator) -> np.ndarray:
    """n elements of type t as raw bytes: random codes with finite random scales."""
    block, size = GGML_QUANT_SIZES[t]
    nb = n // block
    if t == T.F32:
        return (rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 3, n)).astype(np.float32).view(np.uint8)
    if t in (T.F16, T.BF16):
        bits = rng.integers(0, 1 << 16, n, dtype=np.uint16)
        exp_all_ones = (bits & 0x7C00) == 0x7C00 if t == T.F16 else (bits & 0x7F80) == 0x7F80
        bits[exp_all_ones] &= 0xBFFF  # no inf/nan: clear the exponent's top bit
        return bits.view(np.uint8)
    raw = rng.integers(0, 256, (nb, size), dtype=np.uint8)
    for off in F16_FIELDS[t]:
        raw[:, off:off + 2] = random_f16(rng, nb).view(np.uint8).reshape(nb, 2)
    return raw.reshape(-1)


def random_floats(rng: np.random.Generator, n: int) -> np.ndarray:
    """Gaussian rows with a random scale per 32 values and a few outliers."""
    x = rng.standard_normal(n) * np.repeat(10.0 ** rng.uniform(-3, 2, n // 32), 32)
    x[rng.integers(0, n, max(1, n // 64))] *= 8
    return x.astype(np.float32)


# ---------------------------------------------------------------- type table

@pytest.mark.parametrize("t", WEIGHT_TYPES + ACT_TYPES, ids=lambda t: t.name)
def test_type_info(t: T):
    info = ffi.new("lkv_type_info *")
    assert lib.lkv_type_info_get(int(t), info) == 0, last_error()
    assert ffi.string(info.name).decode() == t.name.lower().replace("_k", "_K")
    # gguf-py still lists q8_1 with f32 d and s (40 bytes); ggml's block has
    # two f16s (36). q8_1 is an activation format only, never in a file.
    assert (info.block_size, info.type_size) == ((32, 36) if t == T.Q8_1 else GGML_QUANT_SIZES[t])
    assert bool(info.is_weight_type) == (t in WEIGHT_TYPES)
    assert bool(info.is_kv_type) == (t in KV_TYPES)
    assert lib.lkv_row_bytes(int(t), 4 * 256) == 4 * 256 // info.block_size * info.type_size


# ---------------------------------------------------------------- dequantization

@pytest.mark.parametrize("t", WEIGHT_TYPES, ids=lambda t: t.name)
def test_dequantize_matches_gguf(t: T):
    rng = rng_for(1, int(t))
    n = 256 * int(rng.integers(1, 17))
    raw = random_blocks(t, n, rng)
    ours = c_dequantize(t, raw, n)
    ref = quants.dequantize(raw, t).reshape(-1).astype(np.float32)
    assert np.all(np.isfinite(ref)), why(t)
    bad = np.flatnonzero(ours.view(np.uint32) != ref.view(np.uint32))
    assert bad.size == 0 and np.array_equal(ours, ref), why(t, f"first mismatch at {bad[:4]}: "
                                                            f"{ours[bad[:4]]} vs {ref[bad[:4]]}")


GGUF_QUANTIZES = [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]


@pytest.mark.parametrize("t", GGUF_QUANTIZES, ids=lambda t: t.name)
def test_dequantize_of_gguf_quantized_rows(t: T):
    """Blocks as real quantizers make them (the types gguf.quants quantizes)."""
    rng = rng_for(2, int(t))
    x = random_floats(rng, 1024)
    raw = quants.quantize(x, t).view(np.uint8).reshape(-1)
    assert np.array_equal(c_dequantize(t, raw, x.size), quants.dequantize(raw, t).reshape(-1)), why(t)


# ---------------------------------------------------------------- quantization

EXACT_QUANT = [T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1]


@pytest.mark.parametrize("t", EXACT_QUANT, ids=lambda t: t.name)
def test_quantize_matches_gguf(t: T):
    rng = rng_for(3, int(t))
    n = 32 * int(rng.integers(1, 129))
    x = random_floats(rng, n)
    x[rng.integers(0, n, 4)] = 0.0
    x[:32] = 0.0  # an all-zero block takes the d == 0 branch
    if t in (T.F16, T.BF16):  # every exponent: subnormal, overflow to inf, ties
        x = np.concatenate([x, rng.integers(0, 1 << 32, 4096, dtype=np.uint32)
                            .view(np.float32)[:4096]])
        x = x[np.isfinite(x)]
    ours = c_quantize(t, x)
    with np.errstate(over="ignore"):  # f16 overflow to inf is part of the test
        ref = quants.quantize(x, t).view(np.uint8).reshape(-1)
    bad = np.flatnonzero(ours != ref)
    assert bad.size == 0, why(t, f"first differing bytes at {bad[:8]}")


def q8_reference(x: np.ndarray, kind: T) -> np.ndarray:
    """ggml's activation schemes written in numpy: q8_1 = q8_0 plus the f16
    s = d * sum(q); q8_K: inverse scale -127 / (signed extreme), round half to
    even, f32 d = 1 / inverse scale, bsums per 16."""
    if kind == T.Q8_1:
        b = x.reshape(-1, 32)
        d = np.abs(b).max(axis=1, keepdims=True) / np.float32(127)
        with np.errstate(divide="ignore"):
            inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
        q = quants.np_roundf(b * inv).astype(np.int8)
        s = (q.astype(np.int32).sum(axis=1, keepdims=True).astype(np.float32) * d).astype(np.float16)
        return np.concatenate([d.astype(np.float16).view(np.uint8), s.view(np.uint8),
                               q.view(np.uint8)], axis=1).reshape(-1)
    b = x.reshape(-1, 256)
    imax = np.abs(b).argmax(axis=1)
    mx = b[np.arange(len(b)), imax][:, None]
    out = np.zeros((len(b), 292), np.uint8)
    nz = mx[:, 0] != 0
    inv = (np.float32(-127) / mx[nz]).astype(np.float32)
    q = np.clip(np.rint(b[nz] * inv), -127, 127).astype(np.int8)
    out[nz, 0:4] = (np.float32(1) / inv).astype(np.float32).view(np.uint8)
    out[nz, 4:260] = q.view(np.uint8)
    out[nz, 260:] = q.reshape(-1, 16, 16).astype(np.int16).sum(axis=2).astype(np.int16).view(np.uint8)
    return out.reshape(-1)


@pytest.mark.parametrize("t", ACT_TYPES, ids=lambda t: t.name)
def test_activation_quantize_follows_ggml_scheme(t: T):
    rng = rng_for(4, int(t))
    x = random_floats(rng, 256 * int(rng.integers(1, 9)))
    x[:256] = 0.0
    ours = c_quantize(t, x)
    ref = q8_reference(x, t)
    bad = np.flatnonzero(ours != ref)
    assert bad.size == 0, why(t, f"first differing bytes at {bad[:8]}")


def test_q8_K_rounds_ties_to_even_and_takes_the_first_extreme():
    """Blocks whose extreme is -127 (inverse scale exactly 1): every other value
    a fresh random half-integer, so each code is a tie (ties to even); the
    extreme's magnitude repeated with either sign later in the block (the
    first one sets the scale), and a block of zeros beside them."""
    rng = rng_for(5)
    b = (rng.integers(-126, 126, (6, 256)) + 0.5).astype(np.float32)
    for row in b:
        pos = np.sort(rng.choice(256, 3, replace=False))
        row[pos[0]] = -127.0
        row[pos[1:]] = [127.0, -127.0]
    x = np.concatenate([b.reshape(-1), np.zeros(256, np.float32)])
    ours = c_quantize(T.Q8_K, x)
    ref = q8_reference(x, T.Q8_K)
    bad = np.flatnonzero(ours != ref)
    assert bad.size == 0, why(T.Q8_K, f"first differing bytes at {bad[:8]}")


def test_iq4_nl_round_trip():
    """iq4_nl has no gguf quantizer. Its codes must be the nearest table
    levels to x / d for the stored (f16) scale d, and on Gaussian blocks the
    round trip stays close (4-bit non-linear levels: relative RMS error per
    block below 0.15; typical is about 0.08)."""
    rng = rng_for(5)
    x = (rng.standard_normal(4096) * np.repeat(10.0 ** rng.uniform(-3, 2, 128), 32)).astype(np.float32)
    raw = c_quantize(T.IQ4_NL, x)
    y = c_dequantize(T.IQ4_NL, raw, x.size)
    blocks = raw.reshape(-1, 18)
    d = blocks[:, :2].copy().view(np.float16).astype(np.float64)
    codes = np.concatenate([blocks[:, 2:] & 15, blocks[:, 2:] >> 4], axis=1)
    levels = np.array(quants.IQ4_NL.kvalues, np.float64)
    t = x.reshape(-1, 32) / d
    dist = np.abs(t[..., None] - levels)
    chosen = np.take_along_axis(dist, codes[..., None].astype(np.intp), axis=-1)[..., 0]
    assert np.all(chosen <= dist.min(axis=-1) + 1e-3 * (1 + np.abs(t))), why(T.IQ4_NL, "codes not nearest")
    b, yb = x.reshape(-1, 32).astype(np.float64), y.reshape(-1, 32)
    rel = np.sqrt(((b - yb) ** 2).sum(axis=1) / (b ** 2).sum(axis=1))
    assert rel.max() < 0.15, why(T.IQ4_NL, f"worst block relative RMS error {rel.max():.3f}")


# ---------------------------------------------------------------- dot products

def dot_error_bound(t: T, xd: np.ndarray, y: np.ndarray, raw: np.ndarray) -> float:
    """Bound on |vec_dot - dot(dequant(x), y)| in float64.

    The activation is converted to vec_dot_type before the dot:
      - q8_0 / q8_1 / q8_K: each y_j moves by at most half a step, amax_b / 254
        (amax_b the largest |y| of its block), plus the f16 rounding of the
        block scale (q8_0, q8_1: 2^-11 relative, at most amax_b * 2^-11);
      - q8_1's stored s = d * sum(q) is rounded to f16 as well, which moves the
        minimum's term m * s by |m| * 2^-10 * sum_b |y| at most;
      - f16 / bf16: each y_j moves by 2^-11 / 2^-8 of itself; f32: exact.
    On top, f32 accumulation: at most (n/8 + 16) * 2^-24 * sum |x_j y_j|.
    """
    n = y.size
    ax, ay = np.abs(xd.astype(np.float64)), np.abs(y.astype(np.float64))
    vt = VEC_DOT_TYPE[t]
    if vt in (T.Q8_0, T.Q8_1, T.Q8_K):
        blk = 32 if vt != T.Q8_K else 256
        amax = np.repeat(ay.reshape(-1, blk).max(axis=1), blk)
        act = float((ax * amax).sum()) * (1 / 254 + 2.0 ** -11)
        if vt == T.Q8_1:
            m = raw.reshape(-1, GGML_QUANT_SIZES[t][1])[:, 2:4].copy().view(np.float16)
            act += float((np.abs(m[:, 0].astype(np.float64)) * ay.reshape(-1, 32).sum(axis=1)).sum()) * 2.0 ** -10
    else:
        act = float((ax * ay).sum()) * {T.F32: 0.0, T.F16: 2.0 ** -11, T.BF16: 2.0 ** -8}[vt]
    acc = (n / 8 + 16) * 2.0 ** -24 * float((ax * (ay * 1.01)).sum())
    return act + acc + 1e-30


@pytest.mark.parametrize("t", WEIGHT_TYPES, ids=lambda t: t.name)
def test_vec_dot_close_to_float64(t: T):
    rng = rng_for(6, int(t))
    for trial in range(4):
        n = 256 * int(rng.integers(1, 17))
        raw = random_blocks(t, n, rng)
        if t in (T.F16, T.BF16, T.F32):  # keep magnitudes where f32 sums do not overflow
            xd = random_floats(rng, n)
            raw = quants.quantize(xd, t).view(np.uint8).reshape(-1) if t != T.F32 else xd.view(np.uint8)
        xd = c_dequantize(t, raw, n)
        y = random_floats(rng, n)
        got = c_vec_dot(t, raw, y)
        want = float(np.dot(xd.astype(np.float64), y.astype(np.float64)))
        bound = dot_error_bound(t, xd, y, raw)
        assert abs(got - want) <= bound, why(t, f"trial {trial} n={n}: got {got!r}, float64 {want!r}, "
                                                f"|diff| {abs(got - want):.3g} > bound {bound:.3g}")


@pytest.mark.parametrize("t", [T.Q4_0, T.Q4_1, T.Q8_0, T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_vec_dot_is_deterministic(t: T):
    rng = rng_for(7, int(t))
    raw, y = random_blocks(t, 2048, rng), random_floats(rng, 2048)
    assert len({c_vec_dot(t, raw, y) for _ in range(3)}) == 1, why(t)


# ---------------------------------------------------------------- errors

def test_unknown_type_is_refused():
    out = np.zeros(32, np.float32)
    src = np.zeros(64, np.uint8)
    for bad in (-1, 4, 5, 24, 28, 39, 40, 1000):
        st = lib.lkv_dequantize(bad, ffi.from_buffer(src), fbuf(out), 32)
        assert st == lib.LKV_ERR_UNSUPPORTED
        assert str(bad) in last_error() and "type" in last_error()
        assert lib.lkv_row_bytes(bad, 32) == -1
        assert lib.lkv_type_info_get(bad, ffi.new("lkv_type_info *")) != 0


@pytest.mark.parametrize("t", [T.Q4_0, T.Q8_0, T.Q4_K, T.IQ4_NL], ids=lambda t: t.name)
def test_partial_block_is_refused(t: T):
    block = GGML_QUANT_SIZES[t][0]
    n = block + 1
    x = np.zeros(2 * block, np.float32)
    buf = np.zeros(4 * GGML_QUANT_SIZES[t][1], np.uint8)
    out = ffi.new("float *")
    for st in (lib.lkv_dequantize(int(t), ffi.from_buffer(buf), fbuf(x), n),
               lib.lkv_quantize(int(t), fbuf(x), ffi.from_buffer(buf), n),
               lib.lkv_vec_dot(int(t), n, ffi.from_buffer(buf), fbuf(x), out)):
        assert st == lib.LKV_ERR_INVALID_ARG
        msg = last_error()
        assert str(n) in msg and t.name.lower() in msg.lower() and "multiple" in msg
    assert lib.lkv_row_bytes(int(t), n) == -1


def test_missing_functions_are_refused():
    x = np.zeros(256, np.float32)
    buf = np.zeros(2048, np.uint8)
    assert lib.lkv_quantize(int(T.Q4_K), fbuf(x), ffi.from_buffer(buf), 256) == lib.LKV_ERR_UNSUPPORTED
    assert "q4_K" in last_error()
    out = ffi.new("float *")
    assert lib.lkv_vec_dot(int(T.Q8_K), 256, ffi.from_buffer(buf), fbuf(x), out) == lib.LKV_ERR_UNSUPPORTED
    assert "q8_K" in last_error()
