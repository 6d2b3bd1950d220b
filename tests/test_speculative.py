"""Speculative decoding: lkv_decode_ex's logits rows, the drafters, greedy
output identical to plain greedy on the default model, and the accept/reject
rule keeping the target distribution (a chi-square test on a tiny model)."""
import math

import numpy as np
import pytest

from _smollm2 import require_model_path
from fixtures.tiny_models import write_tiny_model

from pyllamakv import Llama
from pyllamakv.spec import verify as spec_decode
from pyllamakv.core.native import Context, Model
from pyllamakv.errors import InvalidArgumentError, UnsupportedError
from pyllamakv.spec.drafters import (DraftModel, PromptLookupDecoding, VocabMismatchError,
                                   default_lookup)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(write_tiny_model(tmp_path_factory.mktemp("spec") / "t.gguf", vocab=True,
                                seed=int(np.random.default_rng().integers(1 << 30))))


# ---------------------------------------------------------------- lkv_decode_ex

def test_decode_ex_rows_match_logits_all(tiny):
    rng = np.random.default_rng()
    tokens = rng.integers(0, 320, 11).tolist()
    m = Model(tiny)
    with Context(m, n_ctx=64, n_batch=16, n_ubatch=4, logits_all=True) as full:
        full.decode(tokens)
        ref = full.logits()
    with Context(m, n_ctx=64, n_batch=16, n_ubatch=4) as ctx:
        for n_logits in (1, 2, 5, 8, 11):    # within the last micro-batch and across them
            ctx.truncate(0)
            ctx.decode(tokens, n_logits=n_logits)
            np.testing.assert_allclose(ctx.logits(), ref[-n_logits:], rtol=1e-5, atol=1e-5)
        ctx.truncate(0)
        ctx.decode(tokens)                   # the default after a wide decode: one row
        assert ctx.logits().shape == (1, 320)
        np.testing.assert_allclose(ctx.logits(), ref[-1:], rtol=1e-5, atol=1e-5)


def test_decode_ex_bad_n_logits_leaves_the_cache(tiny):
    with Context(Model(tiny), n_ctx=64, n_batch=16, n_ubatch=4) as ctx:
        ctx.decode([5, 6, 7])
        for bad in (-1, 4):
            with pytest.raises(InvalidArgumentError, match="n_logits"):
                ctx.decode([8, 9, 10], n_logits=bad)
        assert ctx.n_tokens == 3
        ctx.decode([8, 9], n_logits=2)
        assert ctx.n_tokens == 5 and ctx.logits().shape == (2, 320)


# ---------------------------------------------------------------- drafters

def _lookup_reference(ids, max_n, num, min_n=1):
    """Prompt lookup written as plain loops: the earliest earlier occurrence of
    the last n-gram (n from max_n down to min_n), and what followed it."""
    ids = list(ids)
    for n in range(min(max_n, len(ids) - 1), min_n - 1, -1):
        tail = ids[-n:]
        for i in range(len(ids) - n):
            if ids[i:i + n] == tail and i + n < len(ids):
                return ids[i + n:i + n + num]
    return []


def test_prompt_lookup_examples_and_reference():
    d = PromptLookupDecoding(max_ngram_size=2, num_pred_tokens=10)
    assert d(np.array([1, 2, 3, 4, 1, 2])).tolist() == [3, 4, 1, 2]
    assert PromptLookupDecoding(2, 2)(np.array([1, 2, 3, 4, 1, 2])).tolist() == [3, 4]
    assert d(np.array([5, 6, 7, 6])).tolist() == [7, 6]       # falls back to a 1-gram
    assert PromptLookupDecoding(2, 10, 2)(np.array([5, 6, 7, 6])).tolist() == []   # not below 2
    assert PromptLookupDecoding(3, 10, 2)(np.array([1, 2, 3, 9, 2, 3])).tolist() == [9, 2, 3]
    assert d(np.array([1, 2, 3])).tolist() == []
    rng = np.random.default_rng()
    for _ in range(300):
        ids = rng.integers(0, 4, int(rng.integers(1, 30)))
        n, k = int(rng.integers(1, 5)), int(rng.integers(1, 6))
        m = int(rng.integers(1, n + 1))
        assert PromptLookupDecoding(n, k)(ids).tolist() == _lookup_reference(ids, n, k)
        assert PromptLookupDecoding(n, k, m)(ids).tolist() == _lookup_reference(ids, n, k, m)
    with pytest.raises(ValueError, match="max_ngram_size"):
        PromptLookupDecoding(0)
    with pytest.raises(ValueError, match="min_ngram_size"):
        PromptLookupDecoding(2, 10, 3)
    with pytest.raises(ValueError, match="min_ngram_size"):
        PromptLookupDecoding(2, 10, 0)


def test_lookup_means_the_measured_setting(tiny):
    full, four = default_lookup(), default_lookup(4)
    assert (full.max_ngram_size, full.num_pred_tokens, full.min_ngram_size) == (5, 10, 1)
    assert (four.max_ngram_size, four.num_pred_tokens, four.min_ngram_size) == (5, 4, 1)
    assert full.length.k_max == 10 and four.length.k_max == 4
    assert PromptLookupDecoding().length is None      # llama-cpp-python's: every draft verified
    with Llama(tiny, n_ctx=64, device="cpu", draft_model="lookup") as llm:
        d = llm.draft_model
        assert (d.max_ngram_size, d.num_pred_tokens, d.min_ngram_size) == (5, 10, 1)
        assert d.length is not None


def test_draft_model_vocab_and_spec_errors(tiny, tmp_path):
    other = write_tiny_model(tmp_path / "o.gguf", vocab=True, n_vocab=288, seed=1)
    with pytest.raises(VocabMismatchError, match="vocabulary"):
        Llama(tiny, n_ctx=64, draft_model=str(other))
    with pytest.raises(UnsupportedError, match="mtp"):
        Llama(tiny, n_ctx=64, draft_model="mtp")
    with pytest.raises(TypeError, match="draft_model"):
        Llama(tiny, n_ctx=64, draft_model=3)


def test_draft_model_of_itself_is_accepted_greedily(tiny):
    prompt = [1, 17, 40, 99, 7]
    with Llama(tiny, n_ctx=64, n_batch=16, n_threads=1) as plain, \
            Llama(tiny, n_ctx=64, n_batch=16, n_threads=1,
                  draft_model=DraftModel(tiny, 3, n_threads=1)) as spec:
        g = plain.generate(prompt, temp=0)
        want = [next(g) for _ in range(20)]
        g = spec.generate(prompt, temp=0)
        assert [next(g) for _ in range(20)] == want
        t = spec.timings
        assert t.drafted_tokens > 0 and t.accepted_tokens == t.drafted_tokens
        assert t.tokens_per_pass > 3.0
        for n in (20, 21, 22):   # stopped amid kept drafts: the cache is the plain loop's
            g = plain.generate(prompt, temp=0)
            [next(g) for _ in range(n)]
            g.close()
            g = spec.generate(prompt, temp=0)
            [next(g) for _ in range(n)]
            g.close()
            assert spec.n_tokens == plain.n_tokens == len(prompt) + n - 1
            assert spec.input_ids.tolist() == plain.input_ids.tolist()
            np.testing.assert_allclose(spec.scores, plain.scores, rtol=1e-4, atol=1e-4)


def test_any_callable_drafts_and_bad_drafts_cost_only_speed(tiny):
    rng = np.random.default_rng()
    calls = []

    def noisy(input_ids, **kw):   # random guesses, some out of range, some too many
        calls.append(len(input_ids))
        r = rng.random()
        if r < 0.2:
            return [-1, 5]
        if r < 0.4:
            return rng.integers(0, 320, 400)
        return rng.integers(0, 400, int(rng.integers(0, 6)))

    prompt = rng.integers(3, 320, 6).tolist()
    with Llama(tiny, n_ctx=128, n_batch=16, n_threads=1) as plain, \
            Llama(tiny, n_ctx=128, n_batch=16, n_threads=1, draft_model=noisy) as spec:
        g = plain.generate(prompt, temp=0)
        want = [next(g) for _ in range(40)]
        g = spec.generate(prompt, temp=0)
        assert [next(g) for _ in range(40)] == want
        assert calls and spec.timings.drafted_tokens > 0
        assert spec.timings.drafted_tokens <= 15 * spec.timings.verify_passes   # n_batch - 1


# ---------------------------------------------------------------- greedy exactness

PROMPTS = [
    "The capital of France is",
    "Repeat this list exactly: apple, banana, cherry, date, elderberry, fig, grape. "
    "apple, banana, cherry, date,",
    "def add(a, b):\n    return a + b\n\ndef add(a, b):\n",
    "Once upon a time",
]


def check_greedy_identical(path, draft, max_tokens: int, need_accepted: bool = True, **kw) -> None:
    """Greedy texts of PROMPTS with draft_model=draft equal those without, and
    some drafts were accepted unless need_accepted is false (an adaptive
    lookup may find none worth verifying; kw: Llama's other arguments;
    test_cuda.py too)."""
    with Llama(path, n_ctx=256, n_batch=64, **kw) as plain, \
            Llama(path, n_ctx=256, n_batch=64, draft_model=draft, **kw) as spec:
        accepted = 0
        for prompt in PROMPTS:
            want = plain(prompt, max_tokens=max_tokens, temperature=0)["choices"][0]["text"]
            got = spec(prompt, max_tokens=max_tokens, temperature=0)["choices"][0]["text"]
            assert got == want, prompt
            accepted += spec.timings.accepted_tokens
        assert accepted > 0 or not need_accepted


@pytest.mark.parametrize("drafter", ["lookup", "adaptive", "self"])
def test_greedy_is_identical_on_the_default_model(drafter):
    path = require_model_path()
    draft = {"lookup": PromptLookupDecoding(2, 6), "adaptive": "lookup"}.get(drafter, path)
    check_greedy_identical(path, draft, 24, need_accepted=drafter != "adaptive")


# ---------------------------------------------------------------- the sampled distribution

SAMPLING = dict(temp=1.0, top_k=3, top_p=1.0, min_p=0.0, repeat_penalty=1.3)
PROMPT = [1, 11, 12, 13, 11]
N_TOKENS, N_RUNS = 3, 1500


def _exact(llm):
    """P(first N_TOKENS tokens) under the sampler's chain, by enumeration."""
    sampler = llm.sampler(**{("temperature" if k == "temp" else k): v
                             for k, v in SAMPLING.items()})
    probs = {(): 1.0}
    for _ in range(N_TOKENS):
        nxt = {}
        for prefix, p in probs.items():
            llm.reset()
            llm.eval(PROMPT + list(prefix))
            ids, q = sampler.candidates(llm.scores[-1], llm.input_ids)
            for i, qi in zip(ids, q):
                nxt[prefix + (int(i),)] = p * float(qi)
        probs = nxt
    return probs


def _chi2(counts, probs, n):
    """Chi-square statistic and its 1e-4 critical value (Wilson-Hilferty), with
    the outcomes expected fewer than 5 times pooled into one cell."""
    cells, rest_e, rest_o = [], 0.0, 0
    for key, p in probs.items():
        e, o = p * n, counts.get(key, 0)
        if e < 5:
            rest_e, rest_o = rest_e + e, rest_o + o
        else:
            cells.append((o, e))
    cells.append((rest_o + sum(c for k, c in counts.items() if k not in probs), rest_e))
    cells = [(o, e) for o, e in cells if e > 0] + [(o, 1e-9) for o, e in cells if e == 0 and o]
    stat = sum((o - e) ** 2 / e for o, e in cells)
    df = len(cells) - 1
    z = 3.719                                            # upper 1e-4 normal quantile
    crit = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3
    return stat, crit


def _sample_runs(llm):
    """Counts of the first N_TOKENS tokens over N_RUNS seeds, and the drafts kept."""
    counts, kept = {}, 0
    for seed in range(N_RUNS):
        g = llm.generate(PROMPT, seed=seed, **SAMPLING)
        key = tuple(next(g) for _ in range(N_TOKENS))
        g.close()
        counts[key] = counts.get(key, 0) + 1
        kept += llm.timings.accepted_tokens
    return counts, kept


def _wrong_rule(sampler, logits, history, draft):
    """A plausible bug: on rejection draw from p itself, not from p without
    the draft (the draft then comes out too often)."""
    ids, probs = sampler.candidates(logits, history)
    p_draft = float(probs[ids == draft].sum())
    if sampler.rng.random() < p_draft:
        return True, draft
    return False, spec_decode._draw(sampler.rng, ids, probs)


def test_sampled_tokens_keep_the_target_distribution(tiny, monkeypatch):
    with Llama(tiny, n_ctx=64, n_batch=16, n_threads=1) as ref:
        probs = _exact(ref)
    with Llama(tiny, n_ctx=64, n_batch=16, n_threads=1,
               draft_model=DraftModel(tiny, 2, n_threads=1)) as spec:
        counts, kept = _sample_runs(spec)
        stat, crit = _chi2(counts, probs, N_RUNS)
        assert kept > N_RUNS // 4
        assert stat < crit, (stat, crit)
        monkeypatch.setattr(spec_decode, "accept_draft", _wrong_rule)
        stat, crit = _chi2(_sample_runs(spec)[0], probs, N_RUNS)
        assert stat > crit, ("the test cannot see a wrong rule", stat, crit)


# ---------------------------------------------------------------- CLI

def test_cli_draft_lookup_and_errors():
    require_model_path()
    from click.testing import CliRunner
    from pyllamakv.commands.cli import main

    def run(*args):
        return CliRunner().invoke(main, ["generate", PROMPTS[1], "-n", "8", "--temp", "0",
                                         "--ctx", "128", *args])
    plain, spec = run(), run("--draft", "lookup")
    assert plain.exit_code == 0 and spec.exit_code == 0, spec.output
    assert spec.stdout == plain.stdout
    assert "drafts:" in spec.stderr and "drafts:" not in plain.stderr
    bad = run("--draft", "/nonexistent-draft.gguf")
    assert bad.exit_code == 1 and "Traceback" not in bad.output
