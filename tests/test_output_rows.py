"""The output projection runs only for the rows whose logits are asked for.

native/src/forward.c output_head takes the micro-batch's wanted rows
(lkv_ubatch.want, set by decode.c from logits_all, n_logits or want_logits),
normalises those runs only and multiplies the n_want packed rows by the output
matrix; without logits_all the context's device logits buffer holds one row
(context.c), so a prompt's other positions never reach the vocabulary
projection (248K columns for Qwen3.5). These tests hold the rows it gives to
the full projection's: any set of positions, across micro-batches, on the
CPU backend (row by row the same arithmetic, so the same bits), on the tiny
qwen35 hybrid.
"""
from __future__ import annotations

import numpy as np
import pytest

from pyllamakv.core import native as N
from fixtures.tiny_qwen35 import write_tiny_qwen35


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_qwen35(tmp_path_factory.mktemp("rows") / "tiny.gguf")


def _ctx(m, **kw):
    args = dict(n_ctx=256, n_batch=256, n_ubatch=48, kv_chunk=32, n_threads=2)
    args.update(kw)
    return N.Context(m, **args)


def test_wanted_rows_are_the_full_projections_rows(tiny):
    rng = np.random.default_rng()
    n = int(rng.integers(100, 200))                 # several micro-batches of 48
    tokens = rng.integers(0, 320, n).tolist()
    want = rng.random(n) < 0.1
    want[int(rng.integers(0, n))] = True            # at least one, anywhere
    with N.Model(str(tiny), device="cpu") as m:
        full = _ctx(m, logits_all=True)
        full.decode(tokens)
        ref = full.logits()
        some = _ctx(m)
        rows = some.decode_batch_logits(tokens, [0] * n, want)
        full.close()
        some.close()
    assert ref.shape[0] == n and rows.shape == (int(want.sum()), ref.shape[1])
    assert np.array_equal(rows, ref[want])


def test_a_prompt_without_logits_all_gives_its_last_row(tiny):
    rng = np.random.default_rng()
    tokens = rng.integers(0, 320, int(rng.integers(60, 150))).tolist()
    with N.Model(str(tiny), device="cpu") as m:
        full = _ctx(m, logits_all=True)
        full.decode(tokens)
        one = _ctx(m)
        one.decode(tokens)
        assert one.logits().shape[0] == 1
        assert np.array_equal(one.logits()[0], full.logits()[-1])
        full.close()
        one.close()
