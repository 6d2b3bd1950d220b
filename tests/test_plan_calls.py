"""One residency plan per context build (issue 17): Llama plans the KV pool
once, whatever kv_pool_mib and gpu_memory_mib ask for, and a pool below the
minimum is refused by that one plan with the core's message."""
import warnings

import pytest

from fixtures.tiny_models import write_tiny_model
from pyllamakv import Llama
from pyllamakv.memory import plan
from pyllamakv.errors import PoolTooSmallError


class CountingLib:
    """plan.lib with its calls of lkv_plan_compute counted."""

    def __init__(self, lib):
        self.lib, self.n = lib, 0

    def __getattr__(self, name):
        if name == "lkv_plan_compute":
            self.n += 1
        return getattr(self.lib, name)


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("plan") / "tiny.gguf", vocab=True)


@pytest.mark.parametrize("kw", [{}, {"kv_pool_mib": 1.0}, {"kv_pool_mib": 1000},
                                {"kv_pool_mib": "auto"}, {"gpu_memory_mib": 4000},
                                {"gpu_memory_mib": 4000, "kv_pool_mib": 1.0},
                                {"kv_pool_mib": 0.01},
                                {"gpu_memory_mib": 4000, "kv_pool_mib": 0.01}])
def test_one_plan_per_context(path, monkeypatch, kw):
    counting = CountingLib(plan.lib)
    monkeypatch.setattr(plan, "lib", counting)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # 1000 MiB: clamped to the cache
        if kw.get("kv_pool_mib") == 0.01:
            with pytest.raises(PoolTooSmallError, match="below the minimum of"):
                Llama(path, n_ctx=512, device="cpu", **kw)
        else:
            Llama(path, n_ctx=512, device="cpu", **kw).close()
    assert counting.n == 1, f"{kw}: {counting.n} planner calls for one context"
