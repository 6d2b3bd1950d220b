"""One pool, given once: a server's slots are sequences of one engine whose
context gets --kv-pool-mib whole (not a per-slot share multiplied back), the
core splitting it among the sequences; /props and the startup line say so.
Where a model cannot share (a hybrid on CUDA until verified there, an MTP
block), sharing() names why, and each slot keeps a context with an even share."""
from __future__ import annotations

import os
import random
import threading

import numpy as np
import pytest

from _server import InProcess, need_server_deps
from _smollm2 import require_model_path

need_server_deps()
import httpx  # noqa: E402

from pyllamakv.llama import Llama  # noqa: E402
from pyllamakv.server import ServerSettings, create_app  # noqa: E402
from pyllamakv.server.engines import kv_line, load_engines, memory_layout, sharing  # noqa: E402
from pyllamakv.server.slots import SlotPool  # noqa: E402

MIB = 1 << 20


def _check_one_pool(engines, parallel: int, pool_mib: int) -> None:
    ctx = engines[0].engine.ctx
    assert all(e.engine is engines[0].engine for e in engines)      # one engine, one context
    assert ctx.n_seq_max == parallel
    # each slot drives a sequence of its own of that engine, and no slot is a Llama
    assert sorted(e.sequence.id for e in engines) == list(range(parallel))
    assert all(e.engine.sequence(e.sequence.id) is e.sequence for e in engines)
    assert not any(isinstance(e, Llama) for e in engines)
    assert {e.kv_pool_bytes for e in engines} == {pool_mib * MIB}     # the pool, given once
    shares = [e.sequence.kv_stats()["pool_bytes"] for e in engines]   # the core's split of it,
    left = pool_mib * MIB - sum(shares)        # each share rounded down to its alignment
    assert 0 <= left < parallel * 4096 and len(set(shares)) == 1, (shares, pool_mib)
    layout = memory_layout(engines)
    assert layout == {"contexts": 1, "shared": True, "kv_pool_mib": float(pool_mib),
                      "context_kv_pool_mib": float(pool_mib), "not_shared_because": None}
    assert kv_line(layout) == f"one context shared by the slots, KV pool {pool_mib} MiB"


def test_generation_slots_share_one_pool():
    path = require_model_path()
    parallel, pool_mib = random.choice([2, 3, 4]), random.randint(3, 12)
    s = ServerSettings(path, parallel=parallel, n_ctx=256, kv_pool_mib=pool_mib, n_threads=1)
    slots = SlotPool(load_engines(s), s.queue_size)
    try:
        _check_one_pool([x.engine for x in slots.slots], parallel, pool_mib)
        server = InProcess(create_app(s, slots))
        try:
            props = httpx.get(server.url + "/props", timeout=30).json()
            assert props["kv_cache"]["shared"] is True
            assert props["kv_cache"]["kv_pool_mib"] == pool_mib
            r = httpx.post(server.url + "/v1/completions", timeout=120, json={
                "prompt": "The capital of France is", "max_tokens": 4, "temperature": 0})
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
        finally:
            server.stop()
    finally:
        slots.close()


def test_embedding_slots_share_one_pool():
    path = require_model_path()
    # below the whole cache (about 5.6 MiB a sequence of 128 tokens): a pool above it
    # is clamped, with a warning
    parallel = random.choice([2, 4])
    pool_mib = random.randint(3, 5 * parallel)
    s = ServerSettings(path, parallel=parallel, n_ctx=128, kv_pool_mib=pool_mib, n_threads=1,
                       embedding=True)
    engines = load_engines(s)
    try:
        _check_one_pool(engines, parallel, pool_mib)
        words = ["sun", "river", "stone", "cloud", "seed", "glass", "bird", "iron"]
        texts = [" ".join(random.sample(words, random.randint(2, 6))) for _ in engines]
        alone = [np.array(engines[0].embed(t)) for t in texts]   # one at a time
        got: list = [None] * len(engines)

        def run(i):   # every slot at once: their decodes share the engine's steps
            got[i] = np.array(engines[i].embed(texts[i]))
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(engines))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        for g, a in zip(got, alone):
            assert g is not None and np.allclose(g, a, rtol=1e-4, atol=1e-5)
    finally:
        for e in engines:
            e.close()


def test_sharing_names_what_cannot_share():
    hybrid = {"full_attn_interval": 4}
    assert sharing("cpu", hybrid, 0, 4) is None               # a recurrent state per sequence
    assert sharing("cpu", {}, 0, 4) is None and sharing("cuda", {}, 0, 4) is None
    assert "not yet verified on the cuda backend" in sharing("cuda", hybrid, 0, 4)
    assert "MTP" in sharing("cpu", {}, 1, 2)                  # drafts while stepping alone
    assert sharing("cuda", hybrid, 1, 1) is None              # one slot: nothing to share
    layout = {"contexts": 4, "shared": False, "kv_pool_mib": 64.0,
              "context_kv_pool_mib": 16.0, "not_shared_because": sharing("cpu", {}, 1, 4)}
    assert kv_line(layout).startswith("a context per slot, each KV pool 16 MiB: a slot's MTP")


@pytest.mark.parametrize("parallel", [1, 3])
def test_threads_given_once(parallel):
    s = ServerSettings(parallel=parallel, n_threads=1)
    assert s.engine_threads == min(os.cpu_count() or 1, parallel) and s.threads_per_slot == 1
