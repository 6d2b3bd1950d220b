"""The micro-batch chosen when n_ubatch is left unset (pyllamakv/memory/ubatch.py)."""
from __future__ import annotations

from pyllamakv.memory.ubatch import activation_bytes_per_token, choose_ubatch

HP = dict(n_embd=4096, n_head=32, n_head_kv=8, head_dim=128, n_ff=14336)


def test_streaming_on_the_gpu_takes_the_largest_that_fits():
    gib = 1 << 30
    assert choose_ubatch(HP, "cuda", 8192, 1 * gib, 100 * gib) == 4096
    assert choose_ubatch(HP, "cuda", 2048, 1 * gib, 100 * gib) == 2048   # n_batch caps it
    assert choose_ubatch(HP, "cuda", 300, 1 * gib, 100 * gib) == 300
    per = activation_bytes_per_token(HP)
    # free memory for 1024 tokens' buffers (a quarter of it each time) but not 2048
    assert choose_ubatch(HP, "cuda", 8192, 1 * gib, 4 * 1500 * per) == 1024


def test_resident_on_the_gpu_takes_up_to_4096_and_the_cpu_512():
    gib = 1 << 30
    assert choose_ubatch(HP, "cuda", 8192, None, 100 * gib) == 4096
    assert choose_ubatch(HP, "cuda", 3000, None, 100 * gib) == 2048    # the largest choice within n_batch
    assert choose_ubatch(HP, "cuda", 512, None, 100 * gib) == 512      # n_batch caps it
    per = activation_bytes_per_token(HP)
    assert choose_ubatch(HP, "cuda", 8192, None, 4 * 1500 * per) == 1024
    assert choose_ubatch(HP, "cpu", 8192, 1 * gib, None) == 512
    assert choose_ubatch(HP, "cpu", 64, None, None) == 64


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
