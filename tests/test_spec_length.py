"""spec_length.DraftLength: the draft length chosen from the learned cost of a
pass and the acceptance so far (pyllamakv/spec/length.py), and the adaptive
prompt lookup it drives on the default model."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from _smollm2 import require_model_path

from pyllamakv import Llama
from pyllamakv.spec.length import PRIOR_SLOPE, DraftLength
from pyllamakv.spec.drafters import PromptLookupDecoding


def _train(dl: DraftLength, cost, accept: float, rng, passes: int = 200, match: int = 3) -> None:
    """passes where each draft is kept with probability accept, costing cost(n)"""
    for _ in range(passes):
        k = dl.choose(dl.k_max, match)
        kept = 0
        while kept < k and rng.random() < accept:
            kept += 1
        dl.observe(k, kept, cost(k + 1), match)


def test_flat_cost_and_good_drafts_take_the_longest_draft():
    rng = np.random.default_rng()
    dl = DraftLength(10)
    _train(dl, lambda n: 1.0 + 0.01 * (n - 1), 0.9, rng)
    assert dl.choose(10, 3) == 10
    assert dl.choose(4, 3) == 4          # never more than available
    assert dl.k_counts[10] > 150


def test_steep_cost_and_poor_drafts_take_none():
    rng = np.random.default_rng()
    dl = DraftLength(10)
    _train(dl, lambda n: float(n), 0.3, rng)
    assert dl.choose(10, 3) == 0
    assert dl.k_counts[0] > 180            # a few passes to learn the cost, then none


def test_a_jump_in_cost_stops_the_draft_before_it():
    """All resident on a GPU: flat to 8 tokens, then 6x (spec_verify_h200.csv's shape)."""
    rng = np.random.default_rng()
    dl = DraftLength(10)
    cost = lambda n: 1.0 + 0.02 * (n - 1) if n <= 8 else 6.0 + 0.5 * (n - 9)  # noqa: E731
    _train(dl, cost, 0.8, rng, passes=400)
    assert dl.choose(10, 3) == 7


def test_cost_estimates():
    dl = DraftLength(10)
    assert dl.cost(5) == pytest.approx(1 + 4 * PRIOR_SLOPE)       # nothing measured
    assert dl.choose(10) == 0                                       # first a plain step
    dl.observe(0, 0, 2.0)
    assert dl.cost(1) == 2.0
    assert dl.cost(3) == pytest.approx(2.0 * (1 + 2 * PRIOR_SLOPE))  # the base only: the prior
    dl.observe(1, 0, 2.5)
    assert dl.cost(4) == pytest.approx(2.5 + 2 * 0.5)               # the slope of the two below
    dl.observe(9, 0, 3.0)
    assert dl.cost(8) == pytest.approx(3.0)                         # capped by the size above
    assert dl.cost(11) == pytest.approx(3.0 + 0.5 / 8)              # above all: slope of 2 to 10
    dl.observe(0, 0, 4.0)                                           # an average, not the last
    assert 2.0 < dl.cost(1) < 4.0


def test_acceptance_is_learned_per_match_class():
    dl = DraftLength(6)
    before1, before3 = dl.acceptance(1).copy(), dl.acceptance(3).copy()
    for _ in range(30):
        dl.observe(6, 6, 1.0, match=3)       # long matches: every draft kept
        dl.observe(6, 0, 1.0, match=1)       # 1-grams: the first rejected
    assert (dl.acceptance(3) > before3).all()
    assert dl.acceptance(1)[0] < before1[0] and (dl.acceptance(1)[1:] == before1[1:]).all()
    assert (dl.acceptance(5) == dl.acceptance(3)).all() and (dl.acceptance(None) == dl.acceptance(3)).all()


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12),
                                              st.floats(1e-4, 10.0)), max_size=30),
       st.integers(0, 20), st.sampled_from([None, 0, 1, 2, 3, 7]))
def test_choice_stays_in_range(k_max, passes, available, match):
    dl = DraftLength(k_max)
    for k, kept, secs in passes:
        k = min(k, k_max)
        dl.observe(k, min(kept, k), secs, match)
        assert 0 <= dl.choose(available, match) <= min(available, k_max)


def test_bad_k_max():
    for bad in (0, -1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="k_max"):
            DraftLength(bad)


def test_adaptive_lookup_follows_the_cost_it_learns():
    """The same prompt on the default model: a flat pass cost lets the adaptive
    lookup verify more drafts than a steep one, and both give plain greedy's text."""
    path = require_model_path()
    prompt = ("Repeat this list exactly: apple, banana, cherry, date, elderberry, fig, grape. "
              "List: apple, banana, cherry, date, elderberry, fig, grape. Again:")
    drafted, texts = {}, set()
    with Llama(path, n_ctx=512, n_batch=64, verbose=False) as llm:
        want = llm(prompt, max_tokens=40, temperature=0)["choices"][0]["text"]
        for name, cost in (("flat", lambda n, s: 1.0), ("steep", lambda n, s: float(n) ** 2)):
            d = PromptLookupDecoding(5, 10, 1, adaptive=True)
            d.length = DraftLength(10, cost_of=cost)
            llm.draft_model = d
            texts.add(llm(prompt, max_tokens=40, temperature=0)["choices"][0]["text"])
            drafted[name] = llm.timings.drafted_tokens
    assert texts == {want}
    assert drafted["flat"] > drafted["steep"], drafted


class _Fixed:
    """A drafter of fixed ids whose DraftLength always wants `k` of them."""

    def __init__(self, k: int, n_min: int):
        self.n_min, self.last_match = n_min, 3
        self.length = type("L", (), {"choose": lambda s, avail, match: min(k, avail),
                                     "observe": lambda s, *a: None})()

    def __call__(self, input_ids, **kw):
        return np.asarray(input_ids[-4:], np.intc)


@pytest.mark.parametrize("n_min, drafts", [(3, False), (2, True)])
def test_a_choice_under_n_min_verifies_nothing(n_min, drafts):
    """spec_decode: a DraftLength's k below the drafter's n_min (the server's
    speculative.n_min) verifies no draft."""
    with Llama(require_model_path(), n_ctx=256, n_batch=64, verbose=False) as llm:
        llm.draft_model = _Fixed(2, n_min)
        llm("The capital of France is", max_tokens=8, temperature=0)
        assert (llm.timings.drafted_tokens > 0) == drafts
