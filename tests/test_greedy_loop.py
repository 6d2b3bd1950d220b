"""The core's greedy loop (lkv_generate, engine/greedy_loop.py) against the
Python sampler per token: the same ids and text, the same cache afterwards.

Runs on the CPU backend (the same C loop as on a GPU, where the pick is a
kernel; PYLLAMAKV_TEST_DEVICE=cuda runs these checks there, and test_ops pick
holds the kernel to the host rule), on the default model, a tiny llama model
and a tiny hybrid (qwen35: blocks of one token)."""
import os

import numpy as np
import pytest

from pyllamakv import Llama
from pyllamakv.core.native_gen import has_generate

from fixtures.tiny_models import write_tiny_model
from fixtures.tiny_qwen35 import write_tiny_qwen35

pytestmark = pytest.mark.skipif(not has_generate(), reason="the library predates lkv_generate")

DEVICE = os.environ.get("PYLLAMAKV_TEST_DEVICE", "cpu")   # the GPU machine: cuda


def _run(llm, ahead: bool, prompt, **kw):
    llm.greedy_in_core = ahead
    llm.reset()
    r = llm.create_completion(prompt, temperature=0, **kw)
    return r["choices"][0]["text"], r["choices"][0]["finish_reason"], llm.input_ids.tolist(), \
        llm.scores[-1].copy()


def _same(llm, prompt, **kw):
    a = _run(llm, True, prompt, **kw)
    b = _run(llm, False, prompt, **kw)
    assert a[:3] == b[:3]
    np.testing.assert_array_equal(a[3], b[3])   # the logits the cache ends with
    return a


@pytest.fixture(scope="module")
def smol(path):
    with Llama(path, n_ctx=256, device=DEVICE, n_threads=2, verbose=False) as llm:
        yield llm


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    p = write_tiny_model(tmp_path_factory.mktemp("gl") / "t.gguf", "llama", n_layer=2, seed=3, vocab=True)
    with Llama(str(p), n_ctx=200, device=DEVICE, n_threads=2, verbose=False) as llm:
        yield llm


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    p = write_tiny_qwen35(tmp_path_factory.mktemp("gl") / "q.gguf", seed=5)
    with Llama(str(p), n_ctx=200, device=DEVICE, n_threads=2, verbose=False) as llm:
        yield llm


def test_same_tokens_default_model(smol):
    text, reason, ids, _ = _same(smol, "Once upon a time, in a small village,", max_tokens=40)
    assert reason == "length" and len(text) > 20


def test_logit_bias_and_ban(smol):
    smol.greedy_in_core = True
    smol.reset()
    first = smol.create_completion("The capital of France is", max_tokens=1, temperature=0)
    tok = smol.tokenize(first["choices"][0]["text"].encode(), add_bos=False)[0]
    # ban the first pick, lift another one a little: the core adds the bias in float64 as numpy does
    for bias in ({tok: float("-inf")}, {tok: -0.5, 42: 0.25}, {7: 100.0}):
        _same(smol, "The capital of France is", max_tokens=12, logit_bias=bias)


def test_stop_string_cuts_the_cache_back(smol):
    # the core runs ahead in blocks; a stop string inside one must leave the cache as the Python loop does
    text, reason, ids, _ = _same(smol, "Count: one, two, three, four,", max_tokens=48, stop=["seven"])
    assert reason in ("stop", "length")


@pytest.mark.parametrize("n", [1, 2, 3, 5, 9, 33])
def test_max_tokens(tiny, n):
    text, reason, ids, _ = _same(tiny, [1, 50, 60, 70], max_tokens=n)


def test_stop_ids_end_in_the_core(tiny):
    tiny.greedy_in_core = False
    tiny.reset()
    gen = tiny.generate([1, 50, 60, 70], temp=0)
    seq = [next(gen) for _ in range(12)]
    gen.close()
    end = seq[5]   # as if it were an end id: the core returns it undecoded
    tiny.reset()
    ctx = tiny._ctx
    tiny.eval([1, 50, 60, 70])
    got = ctx.generate(40, -1, [end]).tolist()
    assert got == seq[:seq.index(end) + 1]
    assert ctx.n_tokens == 4 + len(got) - 1


def test_generate_between_tokens(tiny):
    """Llama.generate takes one token per core call: the logits and ids read
    between two tokens are the Python loop's."""
    seen = {}
    for ahead in (True, False):
        tiny.greedy_in_core = ahead
        tiny.reset()
        gen = tiny.generate([1, 50, 60, 70], temp=0)
        rows = []
        for _ in range(9):
            t = next(gen)
            rows.append((t, tiny.n_tokens, tiny.scores[-1].copy()))
        gen.close()
        seen[ahead] = (rows, tiny.n_tokens, tiny.input_ids.tolist())
    (a, na, ia), (b, nb, ib) = seen[True], seen[False]
    assert [r[:2] for r in a] == [r[:2] for r in b] and (na, ia) == (nb, ib)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x[2], y[2])


def test_blocks_closed_inside(tiny):
    """The blocks completion_pieces asks for (ends given, no limit: 1, 2, 4 .. 64),
    closed after k tokens, hold k - 1 of them, with the logits of the last."""
    from pyllamakv.engine.sampling import Sampler, SamplingParams
    for k in (1, 2, 3, 6, 20, 70):
        got = {}
        for ahead in (True, False):
            tiny.greedy_in_core = ahead
            tiny.reset()
            gen = tiny.token_stream([1, 50, 60, 70], Sampler(SamplingParams(temperature=0), tiny.n_vocab()),
                                 ends=())
            seq = [next(gen) for _ in range(k)]
            gen.close()
            got[ahead] = (seq, tiny.n_tokens, tiny.input_ids.tolist(), tiny.scores[-1].copy())
        assert got[True][:3] == got[False][:3] and got[True][1] == 4 + k - 1
        np.testing.assert_array_equal(got[True][3], got[False][3])


def test_hybrid(hybrid):
    _same(hybrid, [1, 20, 30, 40, 50], max_tokens=17)
    _same(hybrid, [1, 20, 30, 40, 51], max_tokens=9, logit_bias={3: -1.0, 4: float("-inf")})


def test_bad_arguments(tiny):
    ctx = tiny._ctx
    tiny.reset()
    with pytest.raises(Exception):
        ctx.generate(4, -1)          # nothing decoded: no logits to pick from
    tiny.eval([1, 2, 3])
    with pytest.raises(Exception):
        ctx.generate(4, -1, (), {10**6: 1.0})
    with pytest.raises(Exception):
        ctx.generate(0, -1)
    assert len(ctx.generate(3, -1)) == 3


def test_stream_closed_after_its_context(tmp_path):
    """A greedy stream left open while its Llama is closed ends quietly when it
    is closed afterwards (it had raised ClosedError inside the generator's
    cleanup, reported as an unraisable exception)."""
    import sys
    path = tmp_path / "t.gguf"
    write_tiny_model(path, "llama", n_layer=2, seed=5, vocab=True)
    llm = Llama(str(path), n_ctx=256, verbose=False, device=DEVICE)
    it = llm.create_completion([5, 6, 7], max_tokens=40, temperature=0, stream=True)
    next(it)
    seen = []
    old, sys.unraisablehook = sys.unraisablehook, seen.append
    try:
        llm.close()
        it.close()
        del it
    finally:
        sys.unraisablehook = old
    assert not seen, [str(u.exc_value) for u in seen]
