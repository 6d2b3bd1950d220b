"""Run-time ISA dispatch of the CPU kernels (native/src/quant/isa.h): every
level the CPU has (portable, AVX2+FMA+F16C, AVX-512 VNNI) gives the same
bits, for the dot of every weight and KV type and for a whole forward (f16
KV cache, so attention's F16C paths are in it too).

Inputs are fresh random blocks and floats; the seed is printed in each
assertion message (PYLLAMAKV_TEST_SEED replays a failure). On a CPU that
lacks a level, that level is skipped.
"""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from pyllamakv.core.ffi import ffi, lib
from pyllamakv.core.native import Context, Model
from test_iquants import IQ_TYPES, random_iq_blocks
from test_quant import WEIGHT_TYPES, c_vec_dot, random_blocks, random_floats, rng_for, why
from fixtures.tiny_models import write_tiny_model

LEVELS = {0: "portable", 1: "avx2", 2: "avx512-vnni"}


def available_levels() -> list[int]:
    prev = lib.lkv_cpu_isa()
    out = [lv for lv in LEVELS if lib.lkv_cpu_isa_set(lv) != -1]
    lib.lkv_cpu_isa_set(prev)
    return out


@pytest.fixture
def levels():
    """The available levels; restores the level of the library after the test."""
    prev = lib.lkv_cpu_isa()
    yield available_levels()
    assert lib.lkv_cpu_isa_set(prev) != -1


def each_level(levels, fn):
    """fn() under each level, as {level: result}."""
    out = {}
    for lv in levels:
        assert lib.lkv_cpu_isa_set(lv) != -1
        assert lib.lkv_cpu_isa() == lv
        out[lv] = fn()
    return out


def same_logits_at_each_level(levels, logits, wtype) -> None:
    """logits() gives the same bits under every level as under the first."""
    got = each_level(levels, logits)
    base = got[levels[0]]
    for lv, v in got.items():
        diff = np.flatnonzero(v.view(np.uint32) != base.view(np.uint32))
        assert diff.size == 0, why(wtype, f"{LEVELS[lv]} differs from {LEVELS[levels[0]]} in "
                                          f"{diff.size} logits, first at {diff[0]}")


def test_the_best_level_is_chosen_and_reported():
    lv = available_levels()
    assert lv[0] == 0  # portable is always there
    assert lib.lkv_cpu_isa() == max(lv)
    features = ffi.string(lib.lkv_build_features()).decode().split()
    assert f"isa:{LEVELS[max(lv)]}" in features


def test_unknown_levels_are_refused():
    prev = lib.lkv_cpu_isa()
    assert lib.lkv_cpu_isa_set(3) == -1
    assert lib.lkv_cpu_isa_set(-2) == -1
    assert lib.lkv_cpu_isa() == prev
    assert lib.lkv_cpu_isa_set(-1) == prev  # -1: the best again
    assert lib.lkv_cpu_isa() == prev


@pytest.mark.parametrize("t", WEIGHT_TYPES + IQ_TYPES, ids=lambda t: t.name)
def test_dots_agree_bit_for_bit_across_levels(levels, t: T):
    rng = rng_for(190, int(t))
    block = 256 if t in IQ_TYPES or t.name.endswith("_K") else 32
    for trial in range(6):
        n = block * int(rng.integers(1, 33))
        raw = random_iq_blocks(t, n, rng) if t in IQ_TYPES else random_blocks(t, n, rng)
        y = random_floats(rng, n)
        got = each_level(levels, lambda: np.float32(c_vec_dot(t, raw, y)).view(np.uint32))
        assert len(set(got.values())) == 1, why(t, f"trial {trial} n={n}: " + ", ".join(
            f"{LEVELS[k]} {np.uint32(v).view(np.float32)!r}" for k, v in got.items()))


@pytest.mark.parametrize("wtype", [T.Q4_1, T.Q8_0, T.Q4_0, T.Q4_K, T.Q6_K, T.F16],
                         ids=lambda t: t.name)
def test_forward_agrees_bit_for_bit_across_levels(tmp_path, levels, wtype: T):
    rng = rng_for(191, int(wtype))
    path = write_tiny_model(tmp_path / "m.gguf", "llama", wtype, seed=int(rng.integers(1 << 31)))
    tokens = rng.integers(0, 320, 40).tolist()

    def logits():
        with Model(str(path)) as m:
            c = Context(m, logits_all=True, n_ctx=64, kv_chunk=16, n_ubatch=16, n_threads=2,
                        type_k="f16", type_v="f16")
            c.decode(tokens[:30])
            for tok in tokens[30:]:  # a few single-token decodes too
                c.decode([tok])
            return c.logits().copy()

    same_logits_at_each_level(levels, logits, wtype)


@pytest.mark.parametrize("wtype", [T.Q4_0, T.Q8_0, T.Q5_0, T.IQ4_NL], ids=lambda t: t.name)
def test_forward_with_odd_widths_agrees_across_levels(tmp_path, levels, wtype: T):
    """Widths of 9 and 11 blocks of 32 and 333 output rows: the matmul's tiles of
    rows (vec_dot_tile) meet a partial 8-block group and a partial row tile, for
    1 to 4 tokens at a time."""
    rng = rng_for(192, int(wtype))
    path = write_tiny_model(tmp_path / "m.gguf", "llama", wtype, n_embd=288, n_ff=352, n_head=9, n_head_kv=3,
                            n_vocab=333, seed=int(rng.integers(1 << 31)))
    tokens = rng.integers(0, 333, 23).tolist()

    def logits():
        with Model(str(path)) as m:
            c = Context(m, logits_all=True, n_ctx=64, n_ubatch=7, n_threads=2)
            c.decode(tokens[:19])
            for tok in tokens[19:]:
                c.decode([tok])
            return c.logits().copy()

    same_logits_at_each_level(levels, logits, wtype)
