"""Sampler chain: greedy, the kept sets of top_k / top_p / min_p, draw
statistics, seeds, penalties, logit bias, parameter validation, logprobs."""
from __future__ import annotations

import math

import numpy as np
import pytest

from pyllamakv.engine.sampling import Sampler, SamplingParams, log_softmax, top_logprobs

RNG = np.random.default_rng()           # fresh per run
OFF = dict(top_k=0, top_p=1.0, min_p=0.0, typical_p=1.0)


def _logits(n: int, scale: float = 3.0) -> np.ndarray:
    return (RNG.normal(size=n) * scale).astype(np.float32)


def _probs(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max())
    return e / e.sum()


@pytest.mark.parametrize("temperature", [0.0, -1.0])
def test_greedy_is_argmax(temperature):
    s = Sampler(SamplingParams(temperature=temperature), 5000)
    for _ in range(20):
        x = _logits(5000)
        assert s.sample(x) == int(np.argmax(x))


def test_top_k_keeps_the_k_largest():
    x = _logits(1000)
    ids, probs = Sampler(SamplingParams(temperature=1.0, **{**OFF, "top_k": 7}), 1000).candidates(x)
    assert set(ids.tolist()) == set(np.argsort(-x)[:7].tolist())
    assert probs.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.9, 0.99])
def test_top_p_keeps_minimal_mass(top_p):
    for n, scale in ((50, 2.0), (4000, 0.5)):          # peaked / flat (> 1024 kept)
        x = _logits(n, scale)
        p = _probs(x)
        ids, _ = Sampler(SamplingParams(temperature=1.0, **{**OFF, "top_p": top_p}), n).candidates(x)
        kept = p[ids]
        assert kept.sum() >= top_p - 1e-9                       # enough mass ...
        assert kept.sum() - kept.min() < top_p                  # ... and minimal
        assert kept.min() >= np.delete(p, ids).max(initial=0)   # the most likely ones


def test_min_p_keeps_tokens_above_fraction_of_max():
    x = _logits(2000)
    p = _probs(x)
    ids, _ = Sampler(SamplingParams(temperature=1.0, **{**OFF, "min_p": 0.1}), 2000).candidates(x)
    expect = np.flatnonzero(p >= 0.1 * p.max() * (1 - 1e-9))
    assert sorted(ids.tolist()) == expect.tolist()


def test_filters_chain_in_order():
    # top_k first (4 kept), then top_p on the renormalised four, then temperature
    x = np.log(np.array([0.4, 0.3, 0.1, 0.1, 0.05, 0.05]))
    # renormalised: 0.4/0.9 + 0.3/0.9 = 0.78 >= 0.76 (on the raw mass 0.7 would not do)
    s = Sampler(SamplingParams(temperature=0.5, top_k=4, top_p=0.76, min_p=0.0), 6)
    ids, probs = s.candidates(x)
    assert ids.tolist() == [0, 1]
    w = np.array([0.4, 0.3]) ** 2               # temperature 0.5 squares probabilities
    np.testing.assert_allclose(probs, w / w.sum())


def _chi2(counts: np.ndarray, p: np.ndarray) -> float:
    exp = counts.sum() * p
    return float(((counts - exp) ** 2 / exp).sum())


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_draws_follow_distribution_over_seeds(temperature):
    n, draws = 6, 6000
    x = np.log(RNG.dirichlet(np.ones(n) * 2) + 0.02)
    target = _probs(x / temperature)
    base = int(RNG.integers(1 << 30))
    counts = np.zeros(n)
    for seed in range(base, base + draws):
        counts[Sampler(SamplingParams(temperature=temperature, seed=seed, **OFF), n).sample(x)] += 1
    # chi-square with 5 degrees of freedom: P(> 30) ~ 1.5e-5
    assert _chi2(counts, target) < 30, (counts, target)


def test_draw_excludes_filtered_tokens():
    x = _logits(300)
    s = Sampler(SamplingParams(temperature=1.5, top_k=5, top_p=1.0, min_p=0.0), 300)
    top5 = set(np.argsort(-x)[:5].tolist())
    seen = {s.sample(x) for _ in range(500)}
    assert seen <= top5 and len(seen) >= 3


def test_seed_reproducible():
    x = _logits(100, 0.5)
    seed = int(RNG.integers(1 << 31))
    a = Sampler(SamplingParams(seed=seed, **OFF), 100)
    b = Sampler(SamplingParams(seed=seed, **OFF), 100)
    c = Sampler(SamplingParams(seed=seed + 1, **OFF), 100)
    sa = [a.sample(x) for _ in range(50)]
    assert sa == [b.sample(x) for _ in range(50)]
    assert sa != [c.sample(x) for _ in range(50)]
    r1 = [Sampler(SamplingParams(seed=-1, **OFF), 100).sample(x) for _ in range(40)]
    assert len(set(r1)) > 1                     # -1: a fresh random seed each time


def test_repeat_penalty_divides_positive_multiplies_negative():
    greedy = dict(temperature=0.0, repeat_penalty=2.0)
    s = Sampler(SamplingParams(**greedy), 4)
    assert s.sample(np.array([2.0, 1.5, 0, 0]), history=[0]) == 1     # 2.0 / 2 < 1.5
    assert s.sample(np.array([2.0, 1.5, 0, 0]), history=[3]) == 0
    assert s.sample(np.array([-1.0, -1.5, -9, -9]), history=[0]) == 1  # -1 * 2 < -1.5


def test_frequency_and_presence_penalties():
    x = np.array([1.0, 0.9, 0.0])
    hist = [0, 0, 0]
    assert Sampler(SamplingParams(temperature=0, frequency_penalty=0.05), 3).sample(x, hist) == 1
    assert Sampler(SamplingParams(temperature=0, frequency_penalty=0.01), 3).sample(x, hist) == 0
    assert Sampler(SamplingParams(temperature=0, presence_penalty=0.2), 3).sample(x, hist) == 1
    assert Sampler(SamplingParams(temperature=0, presence_penalty=0.05), 3).sample(x, hist) == 0


def test_repeat_last_n_window():
    x = np.array([1.0, 0.9] + [0.0] * 8)
    hist = [0] + [5] * 4
    p = dict(temperature=0, repeat_penalty=10.0)
    assert Sampler(SamplingParams(**p, repeat_last_n=4), 10).sample(x, hist) == 0   # 0 is outside
    assert Sampler(SamplingParams(**p, repeat_last_n=5), 10).sample(x, hist) == 1
    assert Sampler(SamplingParams(**p, repeat_last_n=-1), 10).sample(x, hist) == 1
    assert Sampler(SamplingParams(**p, repeat_last_n=0), 10).sample(x, hist) == 0


def test_logit_bias():
    x = _logits(1000)
    target = int(np.argmin(x))
    assert Sampler(SamplingParams(temperature=0, logit_bias={target: 100.0}), 1000).sample(x) == target
    best = int(np.argmax(x))
    s = Sampler(SamplingParams(temperature=1.0, seed=1, logit_bias={best: -math.inf}, **OFF), 1000)
    assert all(s.sample(x) != best for _ in range(200))


@pytest.mark.parametrize("field, value", [
    ("temperature", float("nan")), ("temperature", "hot"), ("top_k", 2.5),
    ("top_p", 1.5), ("top_p", -0.1), ("min_p", 2.0), ("typical_p", -1.0),
    ("repeat_penalty", 0.0), ("presence_penalty", math.inf), ("frequency_penalty", None),
    ("repeat_last_n", -2), ("seed", -5), ("seed", 1.5), ("logit_bias", [1, 2]),
    ("logit_bias", {-1: 1.0}), ("logit_bias", {"a": 1.0}), ("logit_bias", {1: math.nan}),
])
def test_invalid_params_raise(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})


def test_invalid_sampler_inputs_raise():
    with pytest.raises(ValueError, match="logit_bias"):
        Sampler(SamplingParams(logit_bias={10: 1.0}), 10)
    s = Sampler(SamplingParams(repeat_penalty=1.1), 10)
    with pytest.raises(ValueError, match="n_vocab"):
        s.sample(np.zeros(11))
    with pytest.raises(ValueError, match="history"):
        s.sample(np.zeros(10), history=[10])


def test_log_softmax_and_top_logprobs():
    x = _logits(3000)
    lp = log_softmax(x)
    assert np.exp(lp).sum() == pytest.approx(1.0)
    np.testing.assert_allclose(lp, np.log(_probs(x)), atol=1e-9)
    top = top_logprobs(x, 5)
    assert [i for i, _ in top] == np.argsort(-x)[:5].tolist()
    assert [v for _, v in top] == pytest.approx(lp[np.argsort(-x)[:5]].tolist())
    assert top_logprobs(x, 0) == []
    with pytest.raises(ValueError):
        top_logprobs(x, -1)
