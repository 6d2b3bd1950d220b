"""gpu_memory_mib: the budget's arithmetic (budget.py), its errors, and the CLI flags.

The GPU half (NVML's figure against the budget) is tests/test_cuda_budget.py.
"""
import re

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings, strategies as st

from pyllamakv.memory.budget import (MIB, PAGE, BudgetSplit, granule, recurrent_device_bytes,
                              split_budget, weight_device_bytes)
from pyllamakv.errors import MemoryBudgetError, ParameterError, PoolTooSmallError


@pytest.fixture(scope="module")
def weights_mib(path):
    from pyllamakv.gguf.reader import GGUFFile
    return weight_device_bytes(GGUFFile(path).tensors) / MIB


def llama(path, **kw):
    from pyllamakv import Llama
    return Llama(path, device="cpu", n_threads=2, **kw)


def mib_figures(message: str) -> list[float]:
    return [float(x) for x in re.findall(r"(\d+\.\d) MiB", message)]


# ---------------------------------------------------------------- arithmetic

@given(st.integers(0, 1 << 40))
def test_granule_covers_and_rounds(n):
    g = granule(n)
    assert g >= max(n, 16) and g - max(n, 16) < (PAGE if g >= MIB else 512)
    assert g % (PAGE if g >= MIB else 512) == 0
    assert granule(g) == g


sizes = st.integers(0, 1 << 36)


@settings(max_examples=400, deadline=None)
@given(budget=sizes, weights=sizes, workspace=sizes, recurrent=sizes, resident=sizes,
       min_pool=st.integers(1, 1 << 30))
def test_auto_split_fits_or_names_why(budget, weights, workspace, recurrent, resident, min_pool):
    left = budget - weights - workspace - recurrent
    try:
        s = split_budget(budget, weights, workspace, recurrent, resident, min_pool)
    except MemoryBudgetError as e:
        assert weights > budget, str(e)
        figs = mib_figures(str(e))
        assert f"{weights / MIB:.1f}" in str(e) and f"{budget / MIB:.1f}" in str(e), figs
        return
    except PoolTooSmallError as e:
        assert weights <= budget and left < resident and left < granule(min_pool), str(e)
        assert "at least" in str(e)
        return
    assert isinstance(s, BudgetSplit)
    assert s.used <= budget, (s, s.used - budget)
    if s.pool is None:
        assert s.kv == resident and left >= resident
    else:
        assert left < resident and s.pool >= min_pool
        assert s.kv == granule(s.pool) and left - s.kv < PAGE + granule(min_pool)


@settings(max_examples=300, deadline=None)
@given(budget=sizes, weights=sizes, workspace=sizes, resident=sizes,
       pool=st.one_of(st.none(), sizes))
def test_fixed_pool_split_is_checked(budget, weights, workspace, resident, pool):
    left = budget - weights - workspace
    need = resident if pool is None else granule(pool)
    try:
        s = split_budget(budget, weights, workspace, 0, resident, 1, pool, pool_auto=False)
    except MemoryBudgetError as e:
        assert weights > budget or need > left, str(e)
        return
    assert need <= left and s.pool == pool and s.used <= budget


def test_weights_are_counted_once_per_copy():
    class T:
        def __init__(self, offset, nbytes):
            self.offset, self.nbytes = offset, nbytes
    ts = [T(0, 3 * MIB + 1), T(0, 3 * MIB + 1), T(4 * MIB, 100), T(5 * MIB, 0)]
    assert weight_device_bytes(ts) == 4 * MIB + 512


def test_recurrent_state_matches_the_core(tmp_path):
    from fixtures.tiny_qwen35 import write_tiny_qwen35
    from pyllamakv import Llama
    p = write_tiny_qwen35(tmp_path / "q35.gguf", seed=1)
    with Llama(str(p), n_ctx=64, device="cpu", n_threads=1) as llm:
        live = llm._ctx.recurrent_bytes
        assert live > 0
        assert recurrent_device_bytes(llm._model.hparams) == 3 * granule(live)


# ---------------------------------------------------------------- Llama

def test_weights_over_budget_names_both_figures(path, weights_mib):
    with pytest.raises(MemoryBudgetError) as e:
        llama(path, n_ctx=256, gpu_memory_mib=weights_mib / 2)
    msg = str(e.value)
    assert "weights alone" in msg and f"{weights_mib:.1f} MiB" in msg
    assert f"{weights_mib / 2:.1f} MiB" in msg


def test_remainder_below_minimum_pool_names_it(path, weights_mib):
    with pytest.raises(PoolTooSmallError) as e:
        llama(path, n_ctx=4096, gpu_memory_mib=weights_mib + 1)
    assert "at least" in str(e.value) and "KV pool" in str(e.value)


def test_fixed_pool_beyond_the_budget_is_refused(path, weights_mib):
    with pytest.raises(MemoryBudgetError) as e:
        llama(path, n_ctx=4096, gpu_memory_mib=weights_mib + 150, kv_pool_mib=60)
    assert "kv_pool_mib (60.0 MiB)" in str(e.value)


@pytest.mark.parametrize("bad", [0, -5, float("inf"), "16G", True])
def test_budget_value_is_validated(path, bad):
    with pytest.raises((ParameterError, TypeError)) as e:
        llama(path, n_ctx=64, gpu_memory_mib=bad)
    assert "gpu_memory_mib" in str(e.value)


def test_budget_takes_the_rest_and_keeps_the_logits(path, weights_mib):
    """The pool is what the budget leaves; streaming through it changes no logit."""
    prompt = list(np.random.default_rng(7).integers(10, 40000, 300))
    with llama(path, n_ctx=2048, logits_all=True) as ref:
        ref.eval(prompt)
        want = ref.scores.copy()
    for extra, kv in ((400, None), (250, None), (250, "auto")):
        with llama(path, n_ctx=2048, logits_all=True, gpu_memory_mib=weights_mib + extra,
                   kv_pool_mib=kv) as llm:
            m = llm.memory
            assert m.used <= m.budget, m.describe()
            if extra == 400:
                assert llm.kv_pool_bytes is None and m.pool is None, m.describe()
            else:
                assert llm.kv_pool_bytes == m.pool and m.pool > 0, m.describe()
                assert llm.kv_stats()["pool_bytes"] == m.pool
            llm.eval(prompt)
            np.testing.assert_array_equal(llm.scores, want, err_msg=m.describe())


# ---------------------------------------------------------------- command line

def run(*args):
    from pyllamakv.commands.cli import main
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("cmd", [["generate", "hi", "-n", "1"], ["chat"], ["bench", "-p", "8",
                                                                           "-n", "2", "-r", "1"]])
def test_commands_pass_the_budget(path, weights_mib, cmd):
    r = run(*cmd, "--gpu-memory-mib", f"{weights_mib / 2:.3f}", "--device", "cpu")
    assert r.exit_code == 1, r.output
    assert "weights alone" in r.output and f"{weights_mib:.1f} MiB" in r.output


@pytest.mark.parametrize("cmd", [["generate", "hi"], ["serve"], ["info", "--ctx", "64"]])
def test_flag_refuses_a_non_positive_budget(cmd):
    r = run(*cmd, "--gpu-memory-mib", "0")
    assert r.exit_code == 2 and "--gpu-memory-mib" in r.output, r.output


def test_info_splits_the_budget(path, weights_mib):
    r = run("info", path, "--ctx", "8192", "--gpu-memory-mib", f"{weights_mib + 200:.1f}")
    assert r.exit_code == 0, r.output
    assert "device budget" in r.stdout and "(pool)" in r.stdout and "resident fraction" in r.stdout


def test_serve_splits_the_budget_between_slots(path, weights_mib):
    from pyllamakv.gguf.reader import GGUFFile
    from pyllamakv.server.engines import slot_budget_mib
    ts = GGUFFile(path).tensors
    assert slot_budget_mib(weights_mib + 400, ts, 4) == pytest.approx(weights_mib + 100)
    with pytest.raises(MemoryBudgetError, match="weights alone"):
        slot_budget_mib(weights_mib - 1, ts, 2)


# ---------------------------------------------------------------- several sequences

@settings(max_examples=300, deadline=None)
@given(share=st.integers(1, 1 << 34), n=st.integers(2, 64))
def test_sequences_pool_is_the_least_the_core_splits_into_shares(share, n):
    """sequences_pool_bytes: the core's split gives each of n sequences >= share
    bytes (lkv_plan_pool_shares), and one byte less does not. (One sequence has
    the whole pool: the core splits only for n_seq_max > 1, kv/seqs.c.)"""
    from pyllamakv.core.native_seqs import pool_shares
    from pyllamakv.memory.plan import sequences_pool_bytes, share_bytes
    assert sequences_pool_bytes(share, 1) == share == share_bytes(share, 1)
    pool = sequences_pool_bytes(share, n)
    got = pool_shares(pool, [True] * n)
    assert all(b >= share for _, b in got) and got[0][1] == share_bytes(pool, n)
    assert all(o + b <= pool for o, b in got)
    assert share_bytes(pool - 1, n) < share
    with pytest.raises(PoolTooSmallError):
        pool_shares(pool - 1, [True] * n, min_share=share)


def _cfg(n_seq, **kw):
    from pyllamakv.config import LlamaConfig
    return LlamaConfig(n_ctx=2048, device="cpu", n_threads=1, n_seq_max=n_seq, **kw)


def test_budget_plans_for_every_sequence(path, weights_mib):
    """n_seq_max = 3: all resident only when three whole caches fit (one fitting is
    not enough); else one pool that gives each of the three its minimum."""
    from pyllamakv.memory.budget import plan_budget, resident_kv_bytes
    from pyllamakv.gguf.reader import GGUFFile
    from pyllamakv.memory.plan import kv_plan, kv_row_bytes, sequences_pool_bytes
    from pyllamakv.core.native import model_params
    f = GGUFFile(path)
    hp = model_params(f)
    one_kv = resident_kv_bytes(hp, 2048, kv_row_bytes(hp, "f16"), kv_row_bytes(hp, "f16"))
    plan = kv_plan(hp, 2048)

    def split(n_seq, budget_mib, **kw):
        return plan_budget(_cfg(n_seq, gpu_memory_mib=budget_mib, **kw), hp, f.tensors, 2048,
                           "cpu")[0]
    one = split(1, weights_mib + 300)
    assert one.pool is None and one.kv == one_kv, one.describe()
    three = split(3, weights_mib + 300)      # fits one whole cache, not three
    assert three.pool is not None and three.used <= three.budget, three.describe()
    assert three.pool >= sequences_pool_bytes(plan.min_pool_bytes, 3), three.describe()
    roomy = split(3, weights_mib + 400)
    assert roomy.pool is None and roomy.kv == 3 * one_kv, roomy.describe()
    # a fixed pool is clamped to the three whole caches, not to one
    with pytest.warns(RuntimeWarning, match="exceeds the whole KV cache"):
        fixed = split(3, weights_mib + 800, kv_pool_mib=4 * one_kv / MIB)
    assert fixed.pool == 3 * plan.pool_bytes, fixed.describe()
    # a fixed pool whose three shares are each below a sequence's minimum: refused
    with pytest.raises(PoolTooSmallError):
        split(3, weights_mib + 400, kv_pool_mib=1.5 * plan.min_pool_bytes / MIB)


def test_auto_pool_plans_for_every_sequence(path):
    """kv_pool_mib='auto' on the CPU: a quarter of each sequence's cache, times
    n_seq_max, which the context then splits into equal shares."""
    from pyllamakv.memory.plan import PLAN_ALIGN, auto_pool_bytes, kv_plan, share_bytes
    from pyllamakv.core.native import model_params
    from pyllamakv.gguf.reader import GGUFFile
    hp = model_params(GGUFFile(path))
    full = kv_plan(hp, 1024)
    one = auto_pool_bytes(hp, 1024, "cpu", full=full)
    assert one == max(full.pool_bytes // 4, full.min_pool_bytes)
    assert auto_pool_bytes(hp, 1024, "cpu", full=full, n_seq=3) == \
        3 * (-(-one // PLAN_ALIGN) * PLAN_ALIGN)
    with llama(path, n_ctx=1024, n_seq_max=3, kv_pool_mib="auto") as llm:
        assert llm.kv_pool_bytes == auto_pool_bytes(hp, 1024, "cpu", full=full, n_seq=3)
        # kv_stats: sequence 0's share of the one pool
        assert llm.kv_stats()["pool_bytes"] == share_bytes(llm.kv_pool_bytes, 3)
        r = llm.create_completion(["The sky is", "Two plus two is", "Paris is"], max_tokens=3,
                                  temperature=0)
        assert [c["index"] for c in r["choices"]] == [0, 1, 2]
