"""The i-quant weight types (iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s,
iq1_m, iq4_xs) of the C core: dequantization against gguf.quants bit for bit,
the dot with q8_K activations against a float64 dot, the AVX2 path against
the portable one, and tiny models against the numpy reference forward.

Blocks are fresh random bytes (every code is valid in these formats: each
index field addresses a full grid) with finite random f16 super-block
scales. The seed is printed in each assertion message; set
PYLLAMAKV_TEST_SEED to replay a failure.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf import quants

from pyllamakv.core import native as N
from pyllamakv.core.ffi import ffi, last_error, lib
from reference import reference_logits
from test_quant import (c_dequantize, c_vec_dot, q8_reference, random_f16, random_floats, rng_for,
                        why)
from fixtures.tiny_models import set_block_scales, write_tiny_model

IQ_TYPES = [T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S, T.IQ1_S, T.IQ1_M, T.IQ4_XS]
ids = lambda t: t.name  # noqa: E731


def random_iq_blocks(t: T, n: int, rng: np.random.Generator, scales=None) -> np.ndarray:
    """n elements of type t as raw bytes: random codes, finite f16 scales."""
    block, size = GGML_QUANT_SIZES[t]
    nb = n // block
    raw = rng.integers(0, 256, (nb, size), dtype=np.uint8)
    set_block_scales(raw, t, random_f16(rng, nb) if scales is None else scales)
    return raw.reshape(-1)


@pytest.fixture
def portable():
    """Runs the test body with the dots' portable C path, then restores."""
    prev = lib.lkv_quant_force_portable(1)
    yield
    lib.lkv_quant_force_portable(prev)


# ---------------------------------------------------------------- type table

@pytest.mark.parametrize("t", IQ_TYPES, ids=ids)
def test_type_info(t: T):
    info = ffi.new("lkv_type_info *")
    assert lib.lkv_type_info_get(int(t), info) == 0, last_error()
    assert ffi.string(info.name).decode() == t.name.lower()
    assert (info.block_size, info.type_size) == GGML_QUANT_SIZES[t]
    assert info.is_weight_type and not info.is_kv_type
    assert N.TYPE_IDS[t.name.lower()] == int(t)
    with pytest.raises(ValueError, match="not a supported KV cache type"):
        N.type_id(t.name.lower(), kv=True)


def test_generated_tables_are_current(tmp_path):
    """native/src/quant/iq_tables.inc (the data of quant/iq_tables.c and
    cuda/iq_tables.cuh) is what tools/gen_iq_tables.py writes from the
    installed gguf.quants."""
    import importlib.util
    root = Path(__file__).resolve().parent.parent
    if not (root / "tools/gen_iq_tables.py").exists():
        pytest.skip("no source tree (tools/gen_iq_tables.py)")
    spec = importlib.util.spec_from_file_location("gen_iq_tables", root / "tools/gen_iq_tables.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.main(tmp_path / "t.inc")
    assert (tmp_path / "t.inc").read_text() == (root / "native/src/quant/iq_tables.inc").read_text()


# ---------------------------------------------------------------- dequantization

@pytest.mark.parametrize("t", IQ_TYPES, ids=ids)
def test_dequantize_matches_gguf(t: T):
    rng = rng_for(101, int(t))
    n = 256 * int(rng.integers(8, 33))
    raw = random_iq_blocks(t, n, rng)
    ours = c_dequantize(t, raw, n)
    ref = quants.dequantize(raw, t).reshape(-1).astype(np.float32)
    assert np.all(np.isfinite(ref)), why(t)
    bad = np.flatnonzero(ours.view(np.uint32) != ref.view(np.uint32))
    assert bad.size == 0, why(t, f"{bad.size} mismatches, first at {bad[:4]}: "
                                 f"{ours[bad[:4]]} vs {ref[bad[:4]]}")


@pytest.mark.parametrize("t", IQ_TYPES, ids=ids)
def test_dequantize_every_code(t: T):
    """Each byte value at each byte position of a block, once: a block per
    (position, value) pair with all other bytes random."""
    rng = rng_for(102, int(t))
    block, size = GGML_QUANT_SIZES[t]
    raw = np.repeat(random_iq_blocks(t, block * 256, rng).reshape(256, size), size, axis=0)
    pos = np.tile(np.arange(size), 256)
    val = np.repeat(np.arange(256, dtype=np.uint8), size)
    raw[np.arange(raw.shape[0]), pos] = val
    set_block_scales(raw, t, random_f16(rng, raw.shape[0]))  # keep the scales finite
    raw = raw.reshape(-1)
    n = raw.size // size * block
    ours = c_dequantize(t, raw, n)
    ref = quants.dequantize(raw, t).reshape(-1).astype(np.float32)
    assert np.array_equal(ours.view(np.uint32), ref.view(np.uint32)), why(t)


# ---------------------------------------------------------------- dots

def q8k_dot_bound(xd: np.ndarray, y: np.ndarray) -> float:
    """The stated tolerance of an i-quant dot against q8_K activations:
    |vec_dot - dot(dequant(x), y) in float64| <= sum_j |x_j| * amax_b / 254
    (y_j moves by at most half a q8_K step, amax_b / 127 with amax_b the
    largest |y| of its 256-block) + (n / 8 + 16) * 2^-24 * sum_j |x_j y_j|
    (the f32 steps: one rounding of the block's scale product and of its
    integer sum, the accumulation over n / 256 blocks, dequantization's own
    f32 roundings), with 1% slack on |y| for the rounded activations."""
    n = y.size
    ax, ay = np.abs(xd.astype(np.float64)), np.abs(y.astype(np.float64))
    amax = np.repeat(ay.reshape(-1, 256).max(axis=1), 256)
    act = float((ax * amax).sum()) / 254
    acc = (n / 8 + 16) * 2.0 ** -24 * float((ax * (ay * 1.01)).sum())
    return act + acc + 1e-30


def q8k_codes(y: np.ndarray) -> np.ndarray:
    """y as the q8_K activation the dot sees (numpy scheme of test_quant), float64."""
    b = q8_reference(y, T.Q8_K).reshape(-1, 292)
    d = b[:, :4].copy().view(np.float32).astype(np.float64)
    return (d * b[:, 4:260].view(np.int8).astype(np.float64)).reshape(-1)


@pytest.mark.parametrize("path", ["dispatch", "portable"])
@pytest.mark.parametrize("t", IQ_TYPES, ids=ids)
def test_vec_dot_close_to_float64(t: T, path: str, request):
    """Two tolerances. Against the float64 dot of the dequantized weights and
    the q8_K-rounded activation yq, only the f32 steps remain:
    |vec_dot - dot(x, yq)| <= (2 n / 256 + 16) * 2^-24 * sum_j |x_j yq_j|
    (per super-block one rounding each of d * dy, of the integer sum and of
    their product, the f32 accumulation over n / 256 blocks, and the up to two
    roundings in each f32 dequantized value). Against the float y itself, the
    bound of q8k_dot_bound adds the activation rounding."""
    if path == "portable":
        request.getfixturevalue("portable")
    rng = rng_for(103, int(t))
    for trial in range(6):
        n = 256 * int(rng.integers(1, 33))
        raw = random_iq_blocks(t, n, rng)
        xd = c_dequantize(t, raw, n).astype(np.float64)
        y = random_floats(rng, n)
        got = c_vec_dot(t, raw, y)
        msg = f"{path} trial {trial} n={n}: got {got!r}"
        yq = q8k_codes(y)
        want_q = float(np.dot(xd, yq))
        tight = (2 * n / 256 + 16) * 2.0 ** -24 * float(np.abs(xd * yq).sum()) + 1e-30
        assert abs(got - want_q) <= tight, why(t, f"{msg}, float64 with q8_K activation {want_q!r}, "
                                                  f"|diff| {abs(got - want_q):.3g} > {tight:.3g}")
        want = float(np.dot(xd, y.astype(np.float64)))
        bound = q8k_dot_bound(xd, y)
        assert abs(got - want) <= bound, why(t, f"{msg}, float64 {want!r}, |diff| "
                                                f"{abs(got - want):.3g} > bound {bound:.3g}")


@pytest.mark.parametrize("t", IQ_TYPES, ids=ids)
def test_simd_path_equals_portable(t: T):
    """Both paths compute one exact integer per super-block and the same f32
    steps after it: the same bits (on a CPU without AVX2 both calls take the
    portable path and the test holds trivially)."""
    rng = rng_for(104, int(t))
    for trial in range(8):
        n = 256 * int(rng.integers(1, 41))
        raw, y = random_iq_blocks(t, n, rng), random_floats(rng, n)
        fast = c_vec_dot(t, raw, y)
        prev = lib.lkv_quant_force_portable(1)
        try:
            slow = c_vec_dot(t, raw, y)
        finally:
            lib.lkv_quant_force_portable(prev)
        assert np.float32(fast).view(np.uint32) == np.float32(slow).view(np.uint32), \
            why(t, f"trial {trial} n={n}: {fast!r} vs portable {slow!r}")


def test_force_portable_returns_the_previous_setting():
    prev = lib.lkv_quant_force_portable(1)
    try:
        assert lib.lkv_quant_force_portable(1) == 1
        assert lib.lkv_quant_force_portable(0) == 1
        assert lib.lkv_quant_force_portable(0) == 0
    finally:
        lib.lkv_quant_force_portable(prev)


@pytest.mark.parametrize("t", IQ_TYPES, ids=ids)
def test_partial_block_is_refused(t: T):
    buf = np.zeros(4 * GGML_QUANT_SIZES[t][1], np.uint8)
    x = np.zeros(512, np.float32)
    out = ffi.new("float *")
    st = lib.lkv_vec_dot(int(t), 288, ffi.from_buffer(buf), ffi.from_buffer("float[]", x), out)
    assert st == lib.LKV_ERR_INVALID_ARG and t.name.lower() in last_error().lower()
    assert lib.lkv_quantize(int(t), ffi.from_buffer("float[]", x), ffi.from_buffer(buf), 256) \
        == lib.LKV_ERR_UNSUPPORTED


# ---------------------------------------------------------------- tiny models

# Relative error bound (max |engine - reference| / max |reference|), as for the
# other quantized types in test_engine.py: the engine rounds activations to
# 8-bit blocks before every matmul (about 1% each, compounding over 2 layers).
TOL_QUANT = 6e-2


@pytest.mark.parametrize("t", IQ_TYPES, ids=ids)
def test_tiny_model_matches_reference(tmp_path, t: T):
    rng = rng_for(105, int(t))
    path = write_tiny_model(tmp_path / f"llama-{t.name}.gguf", "llama", t,
                            seed=int(rng.integers(1 << 31)))
    tokens = rng.integers(0, 320, 40).tolist()
    with N.Model(path, device="cpu") as m, \
            N.Context(m, n_ctx=64, kv_chunk=16, n_ubatch=24, n_threads=2, logits_all=True,
                      type_k="f32", type_v="f32") as c:
        c.decode(tokens)
        got = c.logits()
    ref = reference_logits(path, tokens)
    err = np.abs(got - ref).max() / np.abs(ref).max()
    assert err <= TOL_QUANT, why(t, f"relative error {err:.4g}")


def test_tiny_model_batch_equals_token_by_token(tmp_path):
    """vec_dot_rows (prefill, several activation rows per weight row) gives
    the bits of vec_dot (one token at a time)."""
    rng = rng_for(106)
    t = IQ_TYPES[int(rng.integers(len(IQ_TYPES)))]
    path = write_tiny_model(tmp_path / "m.gguf", "llama", t, seed=int(rng.integers(1 << 31)))
    tokens = rng.integers(0, 320, 21).tolist()
    with N.Model(path, device="cpu") as m:
        with N.Context(m, n_ctx=64, n_ubatch=16, n_threads=2, logits_all=True) as c:
            c.decode(tokens)
            batch = c.logits()
        with N.Context(m, n_ctx=64, n_threads=2) as c:
            rows = []
            for tok in tokens:
                c.decode([tok])
                rows.append(c.logits()[0])
    np.testing.assert_array_equal(batch, np.stack(rows), err_msg=why(t))


# ---------------------------------------------------------------- CUDA decoding

@pytest.fixture(scope="module")
def iq_dq_exe(tmp_path_factory):
    """tests/cuda/iq_dq.cu built with nvcc as the library's CUDA sources are
    (--fmad=false); skipped without nvcc."""
    from test_cuda_emu import NVCC
    if NVCC is None:
        pytest.skip("nvcc not found")
    import subprocess
    root = Path(__file__).resolve().parent.parent
    exe = tmp_path_factory.mktemp("iq_dq") / "iq_dq"
    cmd = [NVCC, "-std=c++17", "--fmad=false", "-arch=sm_90", "-O1", "-Xcompiler", "-ffp-contract=off",
           *[f"-I{root / d}" for d in ("native/include", "native/src", "native/src/cuda")],
           str(root / "tests/cuda/iq_dq.cu"), str(root / "native/src/quant/iq_tables.c"), "-o", str(exe)]
    b = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert b.returncode == 0, f"nvcc failed:\n{' '.join(cmd)}\n{b.stdout[-3000:]}\n{b.stderr[-6000:]}"
    return exe


@pytest.mark.parametrize("t", IQ_TYPES, ids=ids)
def test_cuda_iq_dq32_matches_gguf(tmp_path, iq_dq_exe, t: T):
    """cuda/iquant_dq.cuh's decoding, on the host always and in a kernel where
    a GPU is present, bit for bit against gguf.quants."""
    import subprocess
    rng = rng_for(107, int(t))
    n = 256 * int(rng.integers(8, 41))
    raw = random_iq_blocks(t, n, rng)
    (tmp_path / "in.bin").write_bytes(raw.tobytes())
    r = subprocess.run([str(iq_dq_exe), str(int(t)), str(tmp_path / "in.bin"), str(tmp_path / "host.bin"),
                        str(tmp_path / "dev.bin")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    ref = quants.dequantize(raw, t).reshape(-1).astype(np.float32)
    outs = ["host.bin"] + (["dev.bin"] if (tmp_path / "dev.bin").exists() else [])
    if N.cuda_device_count() > 0:
        assert "dev.bin" in outs, r.stdout
    for name in outs:
        got = np.fromfile(tmp_path / name, np.float32)
        bad = np.flatnonzero(got.view(np.uint32) != ref.view(np.uint32))
        assert got.size == n and bad.size == 0, why(t, f"{name}: {bad.size} mismatches, first at "
                                                       f"{bad[:4]}: {got[bad[:4]]} vs {ref[bad[:4]]}")
