"""Unclear errors made clear (issue 38): each bad value raises the project's
own exception naming the parameter or key, or is read as llama.cpp reads it."""
from __future__ import annotations

import random

import numpy as np
import pytest
from gguf import GGUFValueType as V

from pyllamakv.errors import LlamaKVError, ParameterError, ParameterTypeError
from pyllamakv.gguf.reader import GGUFError, GGUFFile


@pytest.mark.parametrize("value", [2**40, -(2**40), 2**31])
def test_type_k_out_of_int32_names_the_parameter(value):
    from pyllamakv.config import LlamaConfig
    with pytest.raises(ParameterError, match="type_k"):
        LlamaConfig(512, type_k=value)
    with pytest.raises(ParameterError, match="type_v"):
        LlamaConfig(512, type_v=value)


def test_top_k_minus_one_is_off():
    from pyllamakv.engine.sampling import SamplingParams
    assert SamplingParams(top_k=-1).top_k == 0
    assert SamplingParams(top_k=-random.randrange(2, 100)).top_k == 0
    with pytest.raises(ParameterTypeError, match="top_k"):
        SamplingParams(top_k=1.5)


def test_top_k_minus_one_samples_from_everything():
    from _smollm2 import require_model_path
    from pyllamakv import Llama
    with Llama(require_model_path(), n_ctx=64, seed=1, verbose=False) as llm:
        a = llm("Hi", max_tokens=4, top_k=-1, temperature=0.0, seed=3)["choices"][0]["text"]
        b = llm("Hi", max_tokens=4, top_k=0, temperature=0.0, seed=3)["choices"][0]["text"]
        assert a == b


class _Strings:
    def __call__(self, input_ids, **kw):
        return np.array(["12", "x"])


def test_a_drafter_returning_strings_is_a_project_error():
    from _smollm2 import require_model_path
    from pyllamakv import Llama
    with Llama(require_model_path(), n_ctx=64, seed=1, verbose=False,
               draft_model=_Strings()) as llm:
        with pytest.raises(ParameterTypeError, match="draft_model"):
            llm("Hi", max_tokens=4, temperature=0.0)


@pytest.mark.parametrize("key,vtype,value", [
    ("full_attention_interval", V.FLOAT32, 2.7),
    ("full_attention_interval", V.STRING, "4"),
    ("ssm.inner_size", V.INT64, 2**40),
    ("block_count", V.INT32, -3),
    ("ssm.group_count", V.BOOL, True),
])
def test_qwen35_metadata_of_the_wrong_type_names_the_key(tmp_path, key, vtype, value):
    from fixtures import gguf_craft as gc
    from fixtures.tiny_qwen35 import write_tiny_qwen35
    from pyllamakv.core.native import model_params
    spec = gc.read_spec(write_tiny_qwen35(tmp_path / "q.gguf", seed=1))
    spec.set(f"qwen35.{key}", vtype, value)
    path = gc.write(spec, tmp_path / "bad.gguf")
    with pytest.raises(GGUFError, match=f"qwen35.{key}"):
        model_params(GGUFFile(path))
    assert issubclass(GGUFError, Exception)
