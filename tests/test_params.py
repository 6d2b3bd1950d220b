"""Bad parameters and arguments: the project's exceptions, naming the parameter
and its range, raised at the call; thread counts and pools clamped with a warning."""
import math
import warnings

import numpy as np
import pytest

from fixtures.tiny_models import write_tiny_model

from pyllamakv import errors


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(write_tiny_model(tmp_path_factory.mktemp("par") / "tiny.gguf", seed=4,
                                vocab=True))


@pytest.fixture(scope="module")
def llm(tiny):
    from pyllamakv import Llama
    with Llama(tiny, n_ctx=128, n_threads=1) as m:
        yield m


def _still_works(llm):
    out = llm([5, 6, 7], max_tokens=3, temperature=0)
    assert out["usage"]["completion_tokens"] <= 3


@pytest.mark.parametrize("kw, exc, name", [
    (dict(max_tokens="5"), TypeError, "max_tokens"),
    (dict(max_tokens=2.0), TypeError, "max_tokens"),
    (dict(max_tokens=2**40), ValueError, "max_tokens"),
    (dict(stop=[5]), TypeError, r"stop\[0\]"),
    (dict(stop=b"x"), TypeError, "stop"),
    (dict(stop=5), TypeError, "stop"),
    (dict(temperature="0.5"), TypeError, "temperature"),
    (dict(temperature=None), TypeError, "temperature"),
    (dict(temperature=math.nan), ValueError, "temperature"),
    (dict(top_p=1.5), ValueError, r"top_p must be a number in \[0.0, 1.0\]"),
    (dict(top_k=2.5), TypeError, "top_k"),
    (dict(top_k=True), TypeError, "top_k"),
    (dict(min_p="a"), TypeError, "min_p"),
    (dict(repeat_penalty=0), ValueError, "repeat_penalty"),
    (dict(seed=2**70), ValueError, "seed"),
    (dict(seed="1"), TypeError, "seed"),
    (dict(logprobs="2"), TypeError, "logprobs"),
    (dict(echo="yes"), TypeError, "echo"),
    (dict(logit_bias=[1]), TypeError, "logit_bias"),
    (dict(logit_bias={"x": 1.0}), ValueError, "logit_bias"),
    (dict(logit_bias={5: "big"}), ValueError, r"logit_bias\[5\]"),
    (dict(logit_bias={10**6: 1.0}), ValueError, "out of range"),
])
@pytest.mark.parametrize("stream", [False, True])
def test_bad_completion_arguments_fail_at_the_call(llm, kw, exc, name, stream):
    with pytest.raises(exc, match=name) as e:
        llm([5, 6, 7], **{"max_tokens": 4, **kw}, stream=stream)   # not at iteration
    assert isinstance(e.value, errors.LlamaKVError)
    _still_works(llm)


def test_logit_bias_that_bans_every_token_is_refused(llm):
    n = llm.n_vocab()
    with pytest.raises(errors.ParameterError, match="bans every one"):
        llm([5, 6], max_tokens=2, logit_bias={i: -math.inf for i in range(n)})
    _still_works(llm)
    gen = llm.generate([5, 6, 7], temp=0, logit_bias={"300": 100.0})   # OpenAI's string keys
    assert next(gen) == 300
    gen.close()


def test_no_token_from_an_empty_or_nan_distribution():
    from pyllamakv.engine.sampling import Sampler, SamplingParams
    for temp in (0.0, 0.8):
        s = Sampler(SamplingParams(temperature=temp, logit_bias={0: -math.inf}), 4)
        with pytest.raises(errors.InvalidArgumentError, match="-inf"):
            s.sample(np.array([1.0, -np.inf, -np.inf, -np.inf]))
        with pytest.raises(errors.InvalidArgumentError, match="NaN"):
            s.sample(np.array([1.0, np.nan, 0.0, 0.0]))


@pytest.mark.parametrize("kw, exc, name", [
    (dict(n_ctx=2**31), ValueError, "n_ctx"),
    (dict(n_batch=2**31), ValueError, "n_batch"),
    (dict(n_ubatch=2**40), ValueError, "n_ubatch"),
    (dict(n_threads=2**31), ValueError, "n_threads"),
    (dict(n_ctx="512"), TypeError, "n_ctx"),
    (dict(n_batch=64.0), TypeError, "n_batch"),
    (dict(n_threads=-2), ValueError, "n_threads"),
    (dict(seed=2**32), ValueError, "seed"),
    (dict(logits_all="no"), TypeError, "logits_all"),
    (dict(kv_pool_mib=math.inf), ValueError, "kv_pool_mib"),
    (dict(kv_pool_mib=2.0**80), ValueError, "kv_pool_mib"),
    (dict(n_gpu_layers=2**40), ValueError, "n_gpu_layers"),
])
def test_bad_llama_parameters_are_named(tiny, kw, exc, name):
    from pyllamakv import Llama
    with pytest.raises(exc, match=name) as e:
        Llama(tiny, **{"n_ctx": 64, **kw})
    assert isinstance(e.value, errors.LlamaKVError)
    assert not isinstance(e.value, OverflowError)


@pytest.mark.parametrize("tokens, exc, match", [
    (["a"], TypeError, r"tokens\[0\]"), ([2**40], ValueError, "out of range"),
    ([-1], ValueError, "out of range"), (b"ab", TypeError, "tokens"), ([1.5], TypeError, "tokens"),
])
def test_bad_token_arguments(llm, tokens, exc, match):
    n = llm.n_tokens
    with pytest.raises(exc, match=match):
        llm.eval(tokens)
    assert llm.n_tokens == n
    with pytest.raises(exc):
        llm.generate(tokens)
    _still_works(llm)


def test_native_context_parameters_are_named(tiny):
    from pyllamakv.core import native as _native
    m = _native.Model(tiny)
    with pytest.raises(errors.ParameterError, match="n_ctx"):
        _native.Context(m, n_ctx=2**31)
    with pytest.raises(errors.ParameterError, match="kv_pool_bytes"):
        _native.Context(m, n_ctx=64, kv_pool_bytes=-5)
    c = _native.Context(m, n_ctx=64)
    with pytest.raises(errors.ParameterError, match="out of range"):
        c.decode([2**33])
    with pytest.raises(errors.ParameterError, match="truncate|n must"):
        c.truncate(2**40)


def test_too_many_threads_are_clamped_with_a_warning(tiny):
    from pyllamakv import Llama
    from pyllamakv.config import usable_cpus
    with pytest.warns(RuntimeWarning, match="n_threads=512 exceeds"):
        llm = Llama(tiny, n_ctx=64, n_threads=512)
    with llm:
        assert llm.config.n_threads == usable_cpus()
        _still_works(llm)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Llama(tiny, n_ctx=64, n_threads=1).close()


def test_pool_larger_than_the_cache_is_clamped_with_a_warning(tiny):
    from pyllamakv import Llama
    from pyllamakv.memory.plan import kv_plan
    with pytest.warns(RuntimeWarning, match="kv_pool_mib=3000 exceeds the whole KV cache"):
        llm = Llama(tiny, n_ctx=64, n_threads=1, kv_pool_mib=3000)
    with llm:
        full = kv_plan(llm._model.hparams, 64).pool_bytes
        assert llm.kv_pool_bytes == full
        assert llm.kv_stats()["pool_bytes"] <= full
        _still_works(llm)
