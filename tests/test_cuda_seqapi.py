"""Prompt lists and per-sequence state on CUDA (skipped without a GPU): with the
exact kernels a prompt list run as sequences of one context gives the texts
of one call per prompt, resident and with a streamed pool; a sequence's state
moves to another sequence (and to a one-sequence context) and decodes on with
the same bits."""
from __future__ import annotations

import numpy as np
import pytest

from pyllamakv import Llama
from pyllamakv.core import native as N

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(N.cuda_device_count() == 0, reason="no CUDA device")]

PROMPTS = ["The capital of France is", "1, 2, 3, 4,", "Once upon a time", "def add(a, b):",
           "Water boils at"]
KW = dict(n_ctx=192, n_ubatch=512, device="cuda", gpu_kernels="exact")


@pytest.mark.parametrize("n_seq_max,pool", [(3, None), (5, None), (4, 12.0)])
def test_cuda_prompt_list_equals_one_call_per_prompt(path, n_seq_max, pool):
    with Llama(path, **KW) as one:
        ref = [one.create_completion(p, max_tokens=16, temperature=0)["choices"][0]["text"]
               for p in PROMPTS]
    with Llama(path, n_seq_max=n_seq_max, kv_pool_mib=pool, **KW) as llm:
        got = [c["text"] for c in
               llm.create_completion(PROMPTS, max_tokens=16, temperature=0)["choices"]]
        streamed = llm.kv_stats(seq_id=1)["streaming"]
    bad = [(i, r, g) for i, (r, g) in enumerate(zip(ref, got)) if r != g]
    assert not bad, f"n_seq_max={n_seq_max} pool={pool}: prompts whose batched text differs " \
                    f"from one call (index, alone, batched): {bad}"
    assert streamed == (pool is not None), f"pool={pool}: streaming={streamed}"


@pytest.mark.parametrize("pool", [None, 12.0])
def test_cuda_seq_state_moves_between_sequences(path, pool):
    with Llama(path, n_seq_max=3, kv_pool_mib=pool, **KW) as llm:
        llm.create_completion(PROMPTS[:3], max_tokens=8, temperature=0)
        s1 = llm.save_state(seq_id=1)
        llm.load_state(s1, seq_id=2)
        assert llm.save_state(seq_id=2).llama_state == s1.llama_state, \
            f"pool={pool}: seq 2's blob after loading seq 1's differs"
        ctx = llm._ctx
        nxt = [28, 1745, 30]
        ctx.decode_batch(nxt + nxt, [1] * 3 + [2] * 3, [True] * 6)
        rows = ctx.logits()
        diff = float(np.max(np.abs(rows[:3] - rows[3:])))
        assert diff == 0.0, f"pool={pool}: seq 2 (loaded from seq 1) decodes other logits, " \
                            f"max |diff| {diff:.3g}"
        with Llama(path, **KW) as one:
            one.load_state(s1)
            assert one.save_state().llama_state == s1.llama_state, \
                f"pool={pool}: a one-sequence context's blob after loading seq 1's differs"
