"""engine/open.py: opening a model's context from load-time settings. The engine
it returns holds the plan a Llama of the same settings makes (the Llama opens
through it), its sequences compute what a Llama computes, it closes the model
it loaded and not one it was given, and the server reaches it without a Llama
(no server module imports llama.py)."""
from __future__ import annotations

import random

import numpy as np
import pytest

from pyllamakv import errors
from pyllamakv.config import LlamaConfig
from pyllamakv.core.native import GGUFFile, Model
from pyllamakv.engine.engine import Engine
from pyllamakv.engine.open import gguf_device, load_model, open_engine
from pyllamakv.llama import Llama
from _smollm2 import require_model_path
from test_structure import import_graph

MIB = 1 << 20


def test_engine_plan_and_logits_equal_a_llamas():
    path = require_model_path()
    n_ctx, pool = random.randint(32, 96), random.randint(1, 3)
    kw = dict(n_ctx=n_ctx, n_threads=1, device="cpu", kv_pool_mib=pool, n_seq_max=2)
    engine = open_engine(path, LlamaConfig(**kw), shared=True)
    try:
        plan = engine.plan
        assert (plan.device, plan.n_ctx, plan.kv_pool_bytes) == ("cpu", n_ctx, pool * MIB)
        assert plan.memory is None and engine.ctx.n_seq_max == 2 and engine.shared
        a, b = engine.open(), engine.open()
        with pytest.raises(errors.ParameterError, match="all given"):
            engine.open()
        rng = np.random.default_rng()
        toks = rng.integers(0, engine.model.n_vocab, random.randint(5, n_ctx - 1)).tolist()
        b.eval(toks)
        assert a.n == 0 and b.n == len(toks)
        with Llama(path, **kw) as llm:
            got = llm.engine.plan
            assert (got.device, got.n_ctx, got.kv_pool_bytes, got.n_ubatch, got.n_cpu_moe) \
                == (plan.device, plan.n_ctx, plan.kv_pool_bytes, plan.n_ubatch, plan.n_cpu_moe)
            assert llm.kv_pool_bytes == plan.kv_pool_bytes and llm.device == "cpu"
            llm.eval(toks)
            np.testing.assert_array_equal(llm.sequence.last_logits(), b.last_logits())
    finally:
        engine.close()
    with pytest.raises(errors.ClosedError):   # the model it loaded went with it
        engine.model.ptr


def test_a_given_model_stays_open():
    path = require_model_path()
    file = GGUFFile(path)
    cfg = LlamaConfig(n_ctx=64, n_threads=1, device="cpu")
    hp, device = gguf_device(file, cfg)
    assert device == "cpu" and hp["n_layer"] > 0
    model = load_model(file, device, 1)
    try:
        engines = [open_engine(model, LlamaConfig(n_ctx=64, n_threads=1)) for _ in range(2)]
        assert all(e.model is model and e.ctx.model is model for e in engines)
        engines[0].close()
        with pytest.raises(errors.ClosedError):
            engines[0].ctx.n_tokens
        seq = engines[1].open()
        seq.eval([1, 2, 3])
        assert seq.n == 3 and model.ptr is not None
        engines[1].close()
    finally:
        model.close()


def test_bad_arguments_are_named():
    path = require_model_path()
    with pytest.raises(errors.ParameterError, match="n_seq_max=2"):
        open_engine(path, LlamaConfig(n_ctx=32, device="cpu"), engine=Engine(2))
    with pytest.raises(errors.ParameterError, match="LlamaConfig"):
        open_engine(path, {"n_ctx": 32})
    with pytest.raises(errors.ParameterError, match="no context yet"):
        Engine(1).open()


def test_the_server_makes_no_llama():
    graph = import_graph()
    server = {m: deps for m, deps in graph.items() if m.startswith("pyllamakv.server")}
    assert server and not [m for m, deps in server.items() if "pyllamakv.llama" in deps]
