"""The CPU prefill's GEMM tiles (lkv_gemm_fn, native/src/quant/gemm_*.c): from 8
tokens on, the weight types that have one unpack a tile of up to 16 weight rows
once and run it against every token, 2 rows x 4 tokens per inner loop. Each
logit must keep the bits of the row dots (one token at a time, vec_dot), on
every ISA level the CPU has.

Shapes: 333 output rows (a partial 16-row tile with an odd last row pair),
k/v of 64 rows, FFN inputs of 3 super-blocks (24 blocks of 32); micro-batches of 29 and 11
tokens (token groups that end in 1 and 3) and single tokens after them. The
32-element formats also at widths of 9 and 11 blocks (a partial group of 8
blocks; rows of unpacked blocks that are not a multiple of 32 bytes).
Models and tokens are fresh random draws; the seed is in the messages
(PYLLAMAKV_TEST_SEED replays a failure).
"""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from pyllamakv.core.ffi import lib
from pyllamakv.core.native import Context, Model
from fixtures.tiny_models import write_tiny_model
from test_isa_dispatch import LEVELS, available_levels
from test_quant import rng_for, why

GEMM_TYPES = [T.Q4_0, T.Q8_0, T.Q5_0, T.IQ4_NL, T.Q4_1, T.Q5_1,
              T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K,
              T.IQ4_XS, T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S, T.IQ1_S, T.IQ1_M]

SHAPE = dict(n_embd=256, n_ff=768, n_head=4, n_head_kv=1, n_vocab=333)
ODD_WIDTHS = dict(n_embd=288, n_ff=352, n_head=9, n_head_kv=3, n_vocab=333)
BLOCK32_TYPES = [t for t in GEMM_TYPES if t in (T.Q4_0, T.Q8_0, T.Q5_0, T.IQ4_NL, T.Q4_1, T.Q5_1)]
N_CTX = 64


def _batched(m, tokens) -> np.ndarray:
    """29 tokens in one micro-batch, then 11 in another, then one at a time."""
    c = Context(m, logits_all=True, n_ctx=N_CTX, n_ubatch=32, n_threads=2)
    out = []
    for part in (tokens[:29], tokens[29:40]):
        c.decode(part)
        out.append(c.logits().copy())
    for tok in tokens[40:]:
        c.decode([tok])
        out.append(c.logits().copy())
    c.close()
    return np.concatenate(out)


def _one_by_one(m, tokens) -> np.ndarray:
    c = Context(m, n_ctx=N_CTX, n_threads=2)
    rows = []
    for tok in tokens:
        c.decode([tok])
        rows.append(c.logits()[0].copy())
    c.close()
    return np.stack(rows)


def _same_bits(got: np.ndarray, want: np.ndarray, t: T, what: str) -> None:
    diff = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert diff.size == 0, why(t, f"{what}: {diff.size} of {got.size} logits differ, "
                                  f"first at {np.unravel_index(diff[0], got.shape)}")


@pytest.mark.parametrize("t", GEMM_TYPES, ids=lambda t: t.name)
def test_gemm_tile_keeps_the_row_dots_bits(tmp_path, t: T):
    _check(tmp_path, t, rng_for(230, int(t)), SHAPE)


@pytest.mark.parametrize("t", BLOCK32_TYPES, ids=lambda t: t.name)
def test_gemm_tile_at_odd_widths(tmp_path, t: T):
    _check(tmp_path, t, rng_for(231, int(t)), ODD_WIDTHS)


def _check(tmp_path, t: T, rng, shape: dict) -> None:
    path = write_tiny_model(tmp_path / "m.gguf", "llama", t, seed=int(rng.integers(1 << 31)),
                            **shape)
    tokens = rng.integers(0, shape["n_vocab"], 43).tolist()
    prev = lib.lkv_cpu_isa()
    try:
        with Model(str(path)) as m:
            ref = None
            for lv in available_levels():
                assert lib.lkv_cpu_isa_set(lv) != -1
                batch = _batched(m, tokens)
                assert np.isfinite(batch).all(), why(t, f"{LEVELS[lv]}: non-finite logits")
                if ref is None:   # the portable level: the row dots, no tile
                    ref = _one_by_one(m, tokens)
                _same_bits(batch, ref, t, f"{LEVELS[lv]} batched vs portable one by one")
                _same_bits(_one_by_one(m, tokens), ref, t, f"{LEVELS[lv]} one by one")
    finally:
        assert lib.lkv_cpu_isa_set(prev) != -1
