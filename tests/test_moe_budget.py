"""gpu_memory_mib with a mixture-of-experts model: the core's plan leaves the experts
of n_cpu_moe's layers out of the device's weights, and with n_cpu_moe unset the
budget chooses the fewest such layers that let the rest fit (budget.plan_budget).

On the CPU the emulated device is held to the plan a CUDA device gets, so the
choice is tested here with the tiny models (tests/fixtures/tiny_moe.py); the GPU
half (NVML against the plan) is tests/test_cuda_budget.py's.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from pyllamakv import Llama
from pyllamakv.config import LlamaConfig
from pyllamakv.core.native import Model
from pyllamakv.core.native_plan import memory_plan
from pyllamakv.errors import MemoryBudgetError, PoolTooSmallError
from pyllamakv.gguf.arch_moe import host_expert
from pyllamakv.memory.budget import MIB, granule, plan_budget, split_for
from fixtures.tiny_moe import write_tiny_qwen3moe, write_tiny_qwen35moe

N_CTX = 256
N_LAYER = 4


@pytest.fixture(scope="module", params=["qwen3moe", "qwen35moe"])
def tiny(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(request.param)
    write = write_tiny_qwen3moe if request.param == "qwen3moe" else write_tiny_qwen35moe
    path = write(d / "m.gguf", T.Q8_0, n_layer=N_LAYER)
    with Model(path) as m:
        yield m


def cfg(budget_mib=None, n_cpu_moe=None) -> LlamaConfig:
    return LlamaConfig(n_ctx=N_CTX, gpu_memory_mib=budget_mib, n_cpu_moe=n_cpu_moe)


def fits(tiny, budget_mib: float, n: int) -> bool:
    try:
        split_for(cfg(budget_mib), tiny.hparams, tiny.file.tensors, N_CTX, "cpu", n)
    except (MemoryBudgetError, PoolTooSmallError):
        return False
    return True


def least_budget_mib(tiny, n: int) -> float:
    """The budget at which every part fits all resident with n layers' experts on the host."""
    s, _ = split_for(cfg(1 << 20), tiny.hparams, tiny.file.tensors, N_CTX, "cpu", n)
    assert s.pool is None
    return s.used / MIB


def test_plan_leaves_host_experts_out(tiny):
    """The core's figure: the device's weights less exactly the allocations of the experts
    of the first n layers (the planner also counts on the CPU what a device would hold)."""
    hp, tensors = tiny.hparams, tiny.file.tensors
    rng = np.random.default_rng()
    n = int(rng.integers(1, N_LAYER + 1))
    full = memory_plan(tensors, hp, "cpu", n_ctx=N_CTX).weights_device
    part = memory_plan(tensors, hp, "cpu", n_ctx=N_CTX, n_cpu_moe=n).weights_device
    experts = [t for t in tensors if host_expert(t.name, n, hp["n_layer"])]
    assert len(experts) == 3 * n
    assert full - part == sum(granule(t.nbytes) for t in experts)
    given = plan_budget(cfg(1024, n), hp, tensors, N_CTX, "cpu")[0]
    assert given.weights == part and given.n_cpu_moe == n and "chosen" not in given.describe()


def test_fewest_host_layers_that_fit(tiny):
    """Random budgets from below the all-host minimum to above the all-device need: the
    chosen n fits and n - 1 does not, and n never grows as the budget does."""
    hp, tensors = tiny.hparams, tiny.file.tensors
    need = [least_budget_mib(tiny, n) for n in range(N_LAYER + 1)]
    assert all(a > b for a, b in zip(need, need[1:])), need   # each layer's experts count
    rng = np.random.default_rng()
    budgets = np.sort(rng.uniform(need[-1] - 0.3, need[0] + 0.3, 24))
    chosen = []
    for b in budgets:
        try:
            s = plan_budget(cfg(float(b)), hp, tensors, N_CTX, "cpu")[0]
        except (MemoryBudgetError, PoolTooSmallError):
            assert not fits(tiny, float(b), N_LAYER)
            chosen.append(N_LAYER + 1)
            continue
        n = s.n_cpu_moe
        assert fits(tiny, float(b), n) and (n == 0 or not fits(tiny, float(b), n - 1)), (b, n)
        assert s.used <= b * MIB
        assert f"n_cpu_moe {n} (chosen)" in s.describe()
        chosen.append(n)
    assert chosen == sorted(chosen, reverse=True), list(zip(budgets, chosen))
    for n in range(N_LAYER + 1):   # at each least budget, at most that many layers
        assert plan_budget(cfg(need[n]), hp, tensors, N_CTX, "cpu")[0].n_cpu_moe <= n
    assert plan_budget(cfg(need[0]), hp, tensors, N_CTX, "cpu")[0].n_cpu_moe == 0


def test_too_small_even_all_host_names_the_numbers(tiny):
    hp, tensors = tiny.hparams, tiny.file.tensors
    all_host = split_for(cfg(1 << 20), hp, tensors, N_CTX, "cpu", N_LAYER)[0]
    budget = float(np.random.default_rng().uniform(0.5, all_host.used / MIB - 1.0))
    with pytest.raises((MemoryBudgetError, PoolTooSmallError)) as e:
        plan_budget(cfg(budget), hp, tensors, N_CTX, "cpu")
    msg = str(e.value)
    assert f"budget of {budget:.1f} MiB" in msg and f"n_ctx={N_CTX}" in msg
    assert f"all {N_LAYER} layers" in msg and f"n_cpu_moe={N_LAYER}" in msg
    assert f"weights ({all_host.weights / MIB:.1f} MiB)" in msg, msg


def test_llama_takes_and_reports_the_choice(tiny, capsys):
    """Llama(gpu_memory_mib=..., n_cpu_moe=None): the chosen n in its budget (memory,
    the verbose line), its config, and the model it loads; the logits are those of a
    Llama without a budget (on the CPU every expert runs with the same kernels)."""
    need = [least_budget_mib(tiny, n) for n in range(N_LAYER + 1)]
    n = int(np.random.default_rng().integers(1, N_LAYER))
    budget = (need[n] + need[n - 1]) / 2   # n layers' experts fit, n - 1's do not all resident
    path = str(tiny.file.path)
    tokens = np.random.default_rng().integers(0, 320, 12).tolist()
    with Llama(path, device="cpu", n_ctx=N_CTX, n_threads=2, gpu_memory_mib=budget,
               verbose=True) as llm:
        chosen = llm.memory.n_cpu_moe
        assert 1 <= chosen <= n and llm.config.n_cpu_moe == chosen
        line = [x for x in capsys.readouterr().err.splitlines() if "device budget" in x]
        assert line and re.search(rf"n_cpu_moe {chosen} \(chosen\)", line[0]), line
        llm.eval(tokens)
        got = np.array(llm.scores[-1])
    with Llama(path, device="cpu", n_ctx=N_CTX, n_threads=2) as ref:
        ref.eval(tokens)
        want = np.array(ref.scores[-1])
    assert np.array_equal(got, want)


@pytest.fixture(scope="module", params=["shared", "apart"])
def served(request, tiny, tmp_path_factory):
    """(model, layout): the tiny model, whose slots share one engine on the CPU, or a
    qwen35moe with an MTP block, whose slots keep a context each (engines.sharing)."""
    if request.param == "shared":
        yield tiny, None
        return
    path = write_tiny_qwen35moe(tmp_path_factory.mktemp("mtp") / "m.gguf", T.Q8_0,
                                n_layer=N_LAYER, n_nextn=1)
    with Model(path) as m:
        yield m, "apart"


def test_serve_chooses_for_its_slots(served):
    """serve --gpu-memory-mib without --n-cpu-moe, 2 slots: the fewest layers such that
    the slots fit (one engine with the whole budget, or each slot's share beside the
    weights loaded once), the model loaded so and every slot planned with it, within
    the budget."""
    from pyllamakv.server.engines import load_engines, server_cpu_moe, slot_budget_mib
    from pyllamakv.server.settings import ServerSettings
    m, apart = served
    hp, tensors = m.hparams, m.file.tensors
    mtp = apart is not None

    def need(n: int) -> float:   # the least budget holding both slots all resident
        c = LlamaConfig(n_ctx=N_CTX, gpu_memory_mib=1 << 20, n_seq_max=1 if apart else 2)
        u = split_for(c, hp, tensors, N_CTX, "cpu", n, wide_logits=True, mtp=mtp)[0].used
        return (u if apart is None else 2 * u - split_for(
            c, hp, tensors, N_CTX, "cpu", n, wide_logits=True, mtp=mtp)[0].weights) / MIB

    def fits(n: int, budget: float) -> bool:
        if apart is None:
            c = LlamaConfig(n_ctx=N_CTX, gpu_memory_mib=budget, n_seq_max=2, n_cpu_moe=n)
        else:
            try:
                b = slot_budget_mib(budget, tensors, 2, n, N_LAYER)
            except MemoryBudgetError:
                return False
            c = LlamaConfig(n_ctx=N_CTX, gpu_memory_mib=b, n_cpu_moe=n)
        try:
            plan_budget(c, hp, tensors, N_CTX, "cpu", wide_logits=True, mtp=mtp)
        except (MemoryBudgetError, PoolTooSmallError):
            return False
        return True
    budget = float(np.random.default_rng().uniform(need(N_LAYER), need(0) + 1.0))
    s = ServerSettings(model=str(m.file.path), n_ctx=N_CTX, parallel=2, device="cpu",
                       n_threads=1, gpu_memory_mib=budget)
    try:
        n = server_cpu_moe(s, tensors, hp, "cpu", apart)
    except (MemoryBudgetError, PoolTooSmallError) as e:
        assert f"all {N_LAYER} layers" in str(e) and "2 slots" in str(e), str(e)
        assert not fits(N_LAYER, budget)
        return
    assert fits(n, budget) and (n == 0 or not fits(n - 1, budget)), (budget, n)
    slots = load_engines(s)
    try:
        assert (slots[0].apart is None) == (apart is None)
        assert [e.memory.n_cpu_moe for e in slots] == [n, n] and slots[0].model.n_cpu_moe == n
        mem = [e.memory for e in slots]
        used = mem[0].used if apart is None else mem[0].weights + sum(x.used - x.weights
                                                                      for x in mem)
        assert used <= budget * MIB + 1, (used / MIB, budget)
        out = slots[0].create_completion([1, 300, 301], max_tokens=2)
        assert out["usage"]["completion_tokens"] == 2
    finally:
        for e in slots:
            e.close()


def test_serve_startup_line_says_where_the_experts_are(tiny):
    """`pyllamakv serve --gpu-memory-mib` on a MoE model without --n-cpu-moe: the startup
    line says how many layers' experts are in host memory and that the budget chose it."""
    from _server import Subprocess, need_server_deps
    from pyllamakv.server.engines import server_cpu_moe
    from pyllamakv.server.settings import ServerSettings
    need_server_deps()
    need = least_budget_mib(tiny, 0)
    budget = f"{need + 50:.1f}"   # room for every expert: 0 layers on the host
    s = ServerSettings(model=str(tiny.file.path), n_ctx=N_CTX, device="cpu",
                       gpu_memory_mib=float(budget))
    n = server_cpu_moe(s, tiny.file.tensors, tiny.hparams, "cpu", None)   # one slot
    server = Subprocess("-m", str(tiny.file.path), "--ctx", str(N_CTX), "--device", "cpu",
                        "--gpu-memory-mib", budget, "--threads", "1")
    try:
        line = [x for x in server.log().splitlines() if "listening on" in x]
        assert line and f"routed experts of {n} layers in host memory (n_cpu_moe chosen)" \
            in line[0], server.log()[-2000:]
    finally:
        server.stop()
