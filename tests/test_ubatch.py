"""The micro-batch chosen when n_ubatch is left unset (pyllamakv/memory/ubatch.py):
the rule over any measure of a micro-batch's buffers, and the core's measure
(its memory plan) behind Llama's choice."""
from __future__ import annotations

import random

from pyllamakv.memory.ubatch import choose_ubatch

GIB = 1 << 30


def _linear(per_token: int):
    return lambda u: u * per_token


def test_streaming_on_the_gpu_takes_the_largest_that_fits():
    per = random.randint(100_000, 400_000)
    act = _linear(per)
    assert choose_ubatch(act, "cuda", 8192, 100 * GIB) == 4096
    assert choose_ubatch(act, "cuda", 2048, 100 * GIB) == 2048   # n_batch caps it
    assert choose_ubatch(act, "cuda", 3000, 100 * GIB) == 2048   # the largest choice within it
    assert choose_ubatch(act, "cuda", 300, 100 * GIB) == 300
    # free memory for 1024 tokens' buffers (a quarter of it each time) but not 2048
    assert choose_ubatch(act, "cuda", 8192, 4 * 1500 * per) == 1024
    assert choose_ubatch(act, "cuda", 8192, None) == 4096           # free memory unknown


def test_the_cpu_takes_512_without_measuring():
    def never(u):
        raise AssertionError("the CPU's choice measures nothing")
    assert choose_ubatch(never, "cpu", 8192, GIB) == 512
    assert choose_ubatch(never, "cpu", 64, None) == 64


def test_the_cores_measure_grows_with_the_micro_batch():
    """Llama's measure (ubatch.chosen_ubatch): the workspace, arena and decode set
    and the backend's buffers of the core's plan, more for a wider micro-batch."""
    from _smollm2 import require_model_path
    from pyllamakv.core.native import GGUFFile, model_params
    from pyllamakv.core.native_plan import memory_plan
    f = GGUFFile(require_model_path())
    hp = model_params(f)
    u = random.choice([32, 64, 128])
    small, big = (memory_plan(f.tensors, hp, "cpu", n_ctx=1024, n_batch=512, n_ubatch=n)
                  for n in (u, 2 * u))
    assert 0 < small.workspace < big.workspace
    assert big.workspace == 2 * small.workspace        # every buffer is per row


def test_llama_reports_the_choice():
    """Llama(n_ubatch=None) on the CPU: 512 capped by n_batch and n_ctx, in kv_stats."""
    from _smollm2 import require_model_path
    from pyllamakv import Llama
    path = require_model_path()
    with Llama(str(path), n_ctx=256, n_batch=128, device="cpu") as llm:
        llm.eval(list(range(1, 40)))
        assert llm.kv_stats()["n_ubatch"] == 128
    with Llama(str(path), n_ctx=256, n_batch=128, n_ubatch=16, device="cpu") as llm:
        assert llm.kv_stats()["n_ubatch"] == 16
