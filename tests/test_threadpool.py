"""The CPU thread pool gives the same bits with any thread count.

Parts are claimed by whichever thread comes first, and on a busy machine the
pool runs jobs on the caller alone for a while (threadpool.c: solo spells);
neither may change a result. Each run decodes a prompt and then a few hundred
single-token steps (the pool measures windows of 256 jobs, so a run this
long crosses many windows and, on a loaded machine, solo spells), and every
row of logits must equal the 1-thread run's.
"""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from pyllamakv.core.native import Context, Model
from fixtures.tiny_models import write_tiny_model


def _run(m, tokens, steps, n_threads):
    with Context(m, n_ctx=256, kv_chunk=16, n_ubatch=16, n_threads=n_threads) as c:
        rows = []
        c.decode(tokens)
        rows.append(c.logits().copy())
        for t in steps:
            c.decode([t])
            rows.append(c.logits().copy())
        return np.stack(rows)


@pytest.mark.parametrize("arch,wtype", [("llama", T.Q4_1), ("qwen2", T.Q8_0),
                                        ("qwen3", T.Q4_K)])
def test_same_logits_for_1_2_3_threads(tmp_path, arch, wtype):
    rng = np.random.default_rng()
    path = write_tiny_model(tmp_path / f"{arch}.gguf", arch, wtype)
    tokens = rng.integers(0, 320, 40).tolist()
    steps = rng.integers(0, 320, 150).tolist()
    with Model(path) as m:
        want = _run(m, tokens, steps, 1)
        for n in (2, 3):
            got = _run(m, tokens, steps, n)
            bad = np.flatnonzero(~(got == want).all(axis=1))
            assert bad.size == 0, (f"{n} threads: {bad.size} of {len(want)} rows differ, first "
                                   f"{bad[:5].tolist()}, max |diff| "
                                   f"{np.abs(got - want).max():.3g}")
