"""The core's sampler chain (native/src/sample_chain.c; lkv_sample, lkv_generate's
sampler fields; engine/core_chain.py) against the Python sampler: the same ids
and the same generator state for the same seed, pick by pick on random rows
(hypothesis), and whole generations on the default model, a tiny llama model
and a tiny hybrid (qwen35): streaming, stop strings and ids, cancels, penalties,
logit_bias with bans. Runs on the CPU backend (the GPU machine: the same checks
with PYLLAMAKV_TEST_DEVICE=cuda, where the chain downloads each row)."""
import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pyllamakv import Llama
from pyllamakv.core.native_gen import has_generate, sample_row
from pyllamakv.engine import core_chain, greedy_loop
from pyllamakv.engine.sampling import Sampler, SamplingParams

from fixtures.tiny_models import write_tiny_model
from fixtures.tiny_qwen35 import write_tiny_qwen35

pytestmark = pytest.mark.skipif(not has_generate(), reason="the library predates lkv_generate")

DEVICE = os.environ.get("PYLLAMAKV_TEST_DEVICE", "cpu")


def _state(rng) -> tuple:
    s = rng.bit_generator.state
    return s["state"]["state"], s["state"]["inc"], s["has_uint32"], s["uinteger"]


# ------------------------------------------------------------------ one pick, random rows

def _row(draw, V):
    kind = draw(st.sampled_from(["normal", "ties", "bans", "flat", "peaked"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if kind == "normal":
        x = rng.standard_normal(V) * draw(st.sampled_from([0.1, 1.0, 4.0, 30.0]))
    elif kind == "ties":
        x = rng.integers(-3, 3, V).astype(np.float64)
    elif kind == "bans":
        x = rng.standard_normal(V) * 8
        x[rng.random(V) < 0.5] = -np.inf
        x[rng.integers(V)] = 1.0
    elif kind == "flat":
        x = np.zeros(V)
    else:
        x = rng.standard_normal(V)
        x[rng.integers(V)] = 40.0
    return x.astype(np.float32)


@st.composite
def cases(draw):
    V = draw(st.sampled_from([1, 2, 3, 9, 64, 700, 1025, 3000]))
    params = {
        "temperature": draw(st.sampled_from([0.0, -1.0, 1e-3, 0.3, 0.8, 1.0, 2.5])),
        "top_k": draw(st.sampled_from([0, -1, 1, 2, 7, 40, V, V + 1])),
        "top_p": draw(st.sampled_from([1.0, 0.0, 0.3, 0.9, 0.95, 0.999])),
        "min_p": draw(st.sampled_from([0.0, 0.05, 0.3, 1.0])),
        "typical_p": draw(st.sampled_from([1.0, 1.0, 0.0, 0.2, 0.9])),
        "repeat_penalty": draw(st.sampled_from([1.0, 1.1, 1.5, 0.7])),
        "frequency_penalty": draw(st.sampled_from([0.0, 0.4, -0.3])),
        "presence_penalty": draw(st.sampled_from([0.0, 0.6, -0.2])),
        "repeat_last_n": draw(st.sampled_from([0, -1, 1, 4, 64])),
    }
    hist = draw(st.lists(st.integers(0, V - 1), max_size=30))
    bias = draw(st.dictionaries(st.integers(0, V - 1),
                                st.sampled_from([-math.inf, -2.0, -0.25, 0.5, 3.0]), max_size=5))
    if V > 1 and sum(v == -math.inf for v in bias.values()) == V:
        bias = {}
    if V == 1:
        bias = {k: v for k, v in bias.items() if v != -math.inf}
    rows = [_row(draw, V) for _ in range(3)]
    return params, hist, bias, draw(st.integers(0, 2**64 - 1)), rows


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_chain_picks_as_the_python_sampler(case):
    params, hist, bias, seed, rows = case
    s = Sampler(SamplingParams(**params, logit_bias=bias, seed=seed), rows[0].size)
    w = core_chain._words(s.rng)
    chain = dict(params, history=np.array(hist, np.int32), rng=w)
    for x in rows:
        try:
            with np.errstate(all="ignore"):   # 0 * -inf in typical_p's entropy, inf - inf at tiny temperatures
                want = s.sample(x, hist)
        except Exception:   # NaN or nothing finite: the core returns no token
            want = -1
        before = w.copy()
        got, drew = sample_row(x, bias, chain)
        assert got == want
        assert np.array_equal(w, core_chain._words(s.rng))   # the same draws
        assert drew == (not np.array_equal(before, w))


def test_pcg64_draws_are_numpys():
    seed = int(np.random.default_rng().integers(2**63))
    rng = np.random.default_rng(seed)
    w = core_chain._words(rng)
    x = np.zeros(1000, np.float32)   # flat: the id is floor(u * 1000) up to rounding
    chain = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "rng": w}
    ref = np.random.default_rng(seed)
    for _ in range(200):
        u = ref.random()
        got, drew = sample_row(x, None, chain)
        assert drew and abs(got - u * 1000) <= 1
    assert _state(ref)[:2] == (int(w[0]) << 64 | int(w[1]), int(w[2]) << 64 | int(w[3]))


def test_candidate_order_depends_on_values_only():
    """top_k keeps the k largest, largest first, ties by the lower id (the order the
    draw maps onto; numpy's argpartition order varies with its SIMD level)."""
    rng = np.random.default_rng()
    x = rng.integers(-4, 4, 500).astype(np.float32)
    s = Sampler(SamplingParams(temperature=1.0, top_k=60, top_p=1.0, min_p=0.0), 500)
    ids, _ = s.candidates(x)
    want = sorted(range(500), key=lambda i: (-x[i], i))[:60]
    assert ids.tolist() == want


def test_bad_chain_fields_are_refused():
    x = np.zeros(10, np.float32)
    w = np.zeros(4, np.uint64)
    for bad in ({"top_p": 1.5}, {"min_p": -0.1}, {"typical_p": 2.0}, {"repeat_penalty": 0.0}, {"temperature": math.nan},
                {"repeat_last_n": -2}, {"frequency_penalty": math.inf}):
        with pytest.raises(Exception, match="generate"):
            sample_row(x, None, {"temperature": 1.0, "rng": w, **bad})
    with pytest.raises(Exception, match="rng_state"):
        sample_row(x, None, {"temperature": 1.0})
    with pytest.raises(Exception, match="history"):
        sample_row(x, None, {"repeat_penalty": 1.2, "history": np.array([10], np.int32)})


# ------------------------------------------------------------------ whole generations

@pytest.fixture(scope="module")
def smol(path):
    with Llama(path, n_ctx=384, device=DEVICE, n_threads=2, verbose=False) as llm:
        yield llm


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    p = write_tiny_model(tmp_path_factory.mktemp("sl") / "t.gguf", "llama", n_layer=2, seed=4, vocab=True)
    with Llama(str(p), n_ctx=300, device=DEVICE, n_threads=2, verbose=False) as llm:
        yield llm


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    p = write_tiny_qwen35(tmp_path_factory.mktemp("sl") / "q.gguf", seed=6)
    with Llama(str(p), n_ctx=200, device=DEVICE, n_threads=2, verbose=False) as llm:
        yield llm


def _completion(llm, core: bool, prompt, stream=False, **kw):
    llm.greedy_in_core = core
    llm.reset()
    r = llm.create_completion(prompt, stream=stream, **kw)
    if stream:
        parts = list(r)
        text = "".join(p["choices"][0]["text"] for p in parts)
        reason = parts[-1]["choices"][0]["finish_reason"]
    else:
        text, reason = r["choices"][0]["text"], r["choices"][0]["finish_reason"]
    return text, reason, llm.input_ids.tolist(), llm.scores[-1].copy()


def _same(llm, prompt, **kw):
    a = _completion(llm, True, prompt, **kw)
    b = _completion(llm, False, prompt, **kw)
    assert a[:3] == b[:3]
    np.testing.assert_array_equal(a[3], b[3])
    return a


SEED_RNG = np.random.default_rng()

COMBOS = [
    {},   # llama-cpp-python's defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05
    {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0},
    {"temperature": 1.3, "top_k": 0, "top_p": 0.9, "min_p": 0.0},
    {"temperature": 0.6, "top_k": 5, "top_p": 1.0, "min_p": 0.2},
    {"temperature": 1.0, "top_k": 0, "typical_p": 0.7, "min_p": 0.0},
    {"temperature": 0.9, "typical_p": 0.5},
    {"temperature": 0.9, "repeat_penalty": 1.3, "frequency_penalty": 0.4, "presence_penalty": 0.3},
    {"temperature": 0.0, "repeat_penalty": 1.6},
    {"temperature": 0.0, "frequency_penalty": 1.0, "presence_penalty": 0.5},
]


@pytest.mark.parametrize("combo", COMBOS)
def test_seeded_completions_default_model(smol, combo):
    seed = int(SEED_RNG.integers(2**32))
    text, reason, ids, _ = _same(smol, "Once upon a time, in a small village,", max_tokens=40, seed=seed,
                                 **combo)
    assert reason == "length" and len(ids) > 40


def test_logit_bias_bans_and_lifts(smol):
    seed = int(SEED_RNG.integers(2**32))
    ref = _completion(smol, False, "The capital of France is", max_tokens=6, seed=seed, temperature=0.5)
    first = smol.tokenize(ref[0].encode(), add_bos=False)
    ban = {t: float("-inf") for t in first[:3]}
    n_prompt = len(smol.tokenize(b"The capital of France is"))
    for bias in (ban, {**ban, 42: 2.5, 1000: -1.0}, {7: 30.0}):
        ids = _same(smol, "The capital of France is", max_tokens=16, seed=seed, temperature=0.9,
                    repeat_penalty=1.2, logit_bias=bias)[2][n_prompt:]
        if bias is not ban and 7 not in bias:
            assert not set(ban) & set(ids)
        if 7 in bias:   # lifted far above the rest (the penalty pulls it back now and then)
            assert ids.count(7) >= len(ids) // 2


def test_streaming_and_stop_strings(smol):
    seed = int(SEED_RNG.integers(2**32))
    kw = dict(max_tokens=60, seed=seed, temperature=0.7, repeat_penalty=1.1)
    full = _same(smol, "Count: one, two, three, four,", **kw)
    streamed = _same(smol, "Count: one, two, three, four,", stream=True, **kw)
    assert streamed[0] == full[0]
    # a stop string inside a block: the cache cut back as the Python loop leaves it
    words = full[0].split()
    stop = words[len(words) // 2] if len(words) > 3 else "e"
    for stream in (False, True):
        text, reason, _, _ = _same(smol, "Count: one, two, three, four,", stream=stream, stop=[stop], **kw)
        assert reason == "stop" and stop not in text


@pytest.mark.parametrize("k", [1, 2, 3, 6, 20, 70])
def test_blocks_closed_inside_keep_the_generator(tiny, k):
    """A block closed after k tokens: the cache, the logits and the sampler's
    generator as the Python loop leaves them (the draws of k picks)."""
    seed = int(SEED_RNG.integers(2**32))
    got = {}
    for core in (True, False):
        tiny.greedy_in_core = core
        tiny.reset()
        s = Sampler(SamplingParams(temperature=1.5, top_k=0, top_p=0.98, min_p=0.0, repeat_penalty=1.2,
                                   seed=seed), tiny.n_vocab())
        gen = tiny.token_stream([1, 50, 60, 70], s, ends=())
        seq = [next(gen) for _ in range(k)]
        gen.close()
        got[core] = (seq, tiny.n_tokens, tiny.input_ids.tolist(), _state(s.rng), tiny.scores[-1].copy())
    assert got[True][:4] == got[False][:4] and got[True][1] == 4 + k - 1
    np.testing.assert_array_equal(got[True][4], got[False][4])


def test_cancel_between_tokens(tiny):
    seed = int(SEED_RNG.integers(2**32))
    got = {}
    for core in (True, False):
        tiny.greedy_in_core = core
        tiny.reset()
        s = Sampler(SamplingParams(temperature=1.2, seed=seed), tiny.n_vocab())
        gen = tiny.token_stream([1, 50, 60, 70], s, ends=())
        seq = [next(gen) for _ in range(9)]
        tiny.sequence.cancel()
        rest = list(gen)
        got[core] = (seq, rest, tiny.n_tokens, tiny.input_ids.tolist(), _state(s.rng))
    assert got[True] == got[False] and got[True][1] == []


def test_generate_one_token_per_call(tiny):
    """Llama.generate (one token per core call): the ids, logits and generator read
    between two tokens are the Python loop's; the sampler then continues in Python."""
    seed = int(SEED_RNG.integers(2**32))
    seen = {}
    for core in (True, False):
        tiny.greedy_in_core = core
        tiny.reset()
        s = Sampler(SamplingParams(temperature=1.0, top_k=20, frequency_penalty=0.5, seed=seed), tiny.n_vocab())
        gen = tiny.generate([1, 50, 60, 70], sampler=s)
        rows = []
        for _ in range(8):
            t = next(gen)
            rows.append((t, tiny.n_tokens, _state(s.rng), tiny.scores[-1].tobytes()))
        gen.close()
        after = s.sample(tiny.scores[-1], tiny.input_ids)   # the sampler goes on from the same state
        seen[core] = (rows, after, tiny.input_ids.tolist())
    assert seen[True] == seen[False]


def test_stop_ids_end_in_the_core(tiny):
    seed = int(SEED_RNG.integers(2**32))
    tiny.greedy_in_core = False
    tiny.reset()
    s = Sampler(SamplingParams(temperature=1.0, seed=seed), tiny.n_vocab())
    gen = tiny.generate([1, 50, 60, 70], sampler=s)
    seq = [next(gen) for _ in range(16)]
    gen.close()
    end = seq[6]
    tiny.reset()
    tiny.eval([1, 50, 60, 70])
    s = Sampler(SamplingParams(temperature=1.0, seed=seed), tiny.n_vocab())
    chain = core_chain.CoreChain(s)
    args = chain.args(tiny.input_ids, -1, 40)
    got = tiny._ctx.generate(40, -1, [end], None, args).tolist()
    chain.done(args)
    assert got == seq[:seq.index(end) + 1]
    assert tiny.n_tokens == 4 + len(got) - 1


def test_hybrid(hybrid):
    seed = int(SEED_RNG.integers(2**32))
    _same(hybrid, [1, 20, 30, 40, 50], max_tokens=17, seed=seed, temperature=1.1, top_k=0, min_p=0.0)
    _same(hybrid, [1, 20, 30, 40, 51], max_tokens=9, seed=seed, temperature=0.8, repeat_penalty=1.4,
          logit_bias={3: -1.0, 4: float("-inf")})
    _same(hybrid, [1, 20, 30, 40, 52], max_tokens=12, seed=seed, stream=True, stop=["a"])


def test_the_chain_runs_in_the_core(tiny, monkeypatch):
    """With the chain on, a seeded completion never calls the Python sampler and
    hands the core the chain's fields; with it off (greedy_in_core False) it does."""
    calls = {"sample": 0, "chain": []}
    real_sample, real_greedy = Sampler.sample, type(tiny.sequence).greedy

    def sample(self, *a, **k):
        calls["sample"] += 1
        return real_sample(self, *a, **k)

    def greedy(self, n_max, pending, ends, bias, chain=None):
        calls["chain"].append(chain)
        return real_greedy(self, n_max, pending, ends, bias, chain)

    monkeypatch.setattr(Sampler, "sample", sample)
    monkeypatch.setattr(type(tiny.sequence), "greedy", greedy)
    kw = dict(max_tokens=24, seed=3, temperature=0.9, repeat_penalty=1.2, logit_bias={5: -math.inf})
    _completion(tiny, True, [1, 50, 60, 70], **kw)
    assert calls["sample"] == 0 and calls["chain"]
    assert all(c is not None and c["temperature"] == 0.9 and c["repeat_penalty"] == 1.2 for c in calls["chain"])
    calls["chain"].clear()
    _completion(tiny, False, [1, 50, 60, 70], **kw)
    assert calls["sample"] >= 24 and not calls["chain"]


def test_hooks_stay_in_python(tiny):
    """mirostat, grammars, logits processors and stopping_criteria keep the Python loop."""
    seq = tiny.sequence
    mk = lambda **kw: tiny.sampler(**kw)   # noqa: E731
    ok = lambda s, **kw: greedy_loop.loop_ok(seq, s, **kw)   # noqa: E731
    assert ok(mk(temperature=0.8, seed=1))
    assert ok(mk(temperature=0.8, typical_p=0.5, repeat_penalty=1.2, seed=1))
    assert ok(mk(temperature=0.0, mirostat_mode=2, seed=1))   # greedy ignores it
    assert not ok(mk(temperature=0.8, mirostat_mode=2, seed=1))
    assert not ok(mk(temperature=0.8, logits_processor=lambda i, s: s, seed=1))
    assert not ok(mk(temperature=0.8, seed=1), stopping_criteria=lambda i, s: False)
    assert not ok(mk(temperature=0.8, seed=1), logits_all=True)
    assert not ok(mk(temperature=0.8, seed=1), in_core=False)
