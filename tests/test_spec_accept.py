"""The speculative benchmarks' measuring parts (tests/fixtures/spec_bench.py, as
benchmarks/bench_spec_accept.py and bench_speculative.py use them) and their
tasks (fixtures/spec_tasks.py): speculative greedy equals
plain greedy on a code-edit task with the lookup drafter (default model), the
benchmark's n-gram drafter (prompt only, minimum n-gram) against a plain-loop
reference, the pass counting, and the cost model of bench_speculative.py
effective."""
from collections import Counter

import numpy as np
import pytest

from _smollm2 import require_model_path

from fixtures import spec_bench as acc
from fixtures import spec_bench as bs
from fixtures import spec_tasks
from pyllamakv import Llama
from pyllamakv.spec.drafters import PromptLookupDecoding


def test_lookup_greedy_equals_plain_on_a_code_edit_task():
    path = require_model_path()
    rng = np.random.default_rng()
    task = spec_tasks.CODE[int(rng.integers(len(spec_tasks.CODE)))]
    n, k = int(rng.integers(2, 6)), int(rng.integers(3, 11))
    m = int(rng.integers(1, min(n, 3) + 1))
    rec = acc.Recorder(PromptLookupDecoding(n, k, m))
    with Llama(path, n_ctx=1024, n_batch=64) as plain, \
            Llama(path, n_ctx=1024, n_batch=64, draft_model=rec) as spec:
        tokens, ends = acc.prompt_tokens(plain, task)
        want, _ = acc.greedy(plain, tokens, ends, 48)
        rec.start(len(tokens))
        got, _ = acc.greedy(spec, tokens, ends, 48)
        t = spec.timings
    assert got == want, (task.name, n, k, m)
    assert len(want) == 48                       # the reply is long enough to test
    assert t.accepted_tokens > 0, task.name      # the reply copies the snippet
    assert sum(rec.k_counts.values()) == t.verify_passes
    assert sum(k * c for k, c in rec.k_counts.items()) == t.drafted_tokens


def _ngram_reference(ids, src, max_n, min_n, k):
    ids, src = list(ids), list(src)
    for n in range(min(max_n, len(ids) - 1), min_n - 1, -1):
        tail = ids[-n:]
        for i in range(len(src) - n):
            if src[i:i + n] == tail:
                return src[i + n:i + n + k]
    return []


def test_ngram_draft_matches_a_reference_and_the_library():
    rng = np.random.default_rng()
    for _ in range(300):
        ids = rng.integers(0, 4, int(rng.integers(1, 30)))
        n_prompt = int(rng.integers(0, ids.size + 1))
        n, k = int(rng.integers(1, 4)), int(rng.integers(1, 6))
        min_n = int(rng.integers(1, n + 1))
        for src in (ids, ids[:n_prompt]):
            got = acc.ngram_draft(ids, src, n, min_n, k).tolist()
            assert got == _ngram_reference(ids, src, n, min_n, k), (ids, src, n, min_n, k)
        assert acc.ngram_draft(ids, ids, n, min_n, k).tolist() == \
            PromptLookupDecoding(n, k, min_n)(ids).tolist()


def test_pass_cost_prices_each_pass_at_its_k():
    rng = np.random.default_rng()
    cost = {k: 1.0 + float(rng.random()) * k for k in range(9)}
    counts = Counter({int(k): int(rng.integers(1, 20)) for k in rng.choice(9, 4, replace=False)})
    want = sum(cost[k] * c for k, c in counts.items()) / sum(counts.values())
    assert bs.pass_cost(cost, counts) == pytest.approx(want)
    with pytest.raises(SystemExit, match="--max-k 12"):
        bs.pass_cost(cost, Counter({12: 1}))


def test_class_summary_sums_the_tasks():
    rows = [dict(task="a", kind="code", setting="s", max_draft=4, tokens=10, passes=4,
                 drafted=8, accepted=6, plain_tps=10.0, spec_tps=20.0, identical=True,
                 k_counts="0:1 4:2 2:1"),
            dict(task="b", kind="code", setting="s", max_draft=4, tokens=30, passes=20,
                 drafted=20, accepted=10, plain_tps=30.0, spec_tps=30.0, identical=True,
                 k_counts="1:20")]
    (s,) = acc.class_summary(rows)
    assert (s["tokens"], s["passes"], s["accepted"]) == (40, 24, 16)
    assert s["tokens_per_pass"] == pytest.approx(40 / 24)
    assert s["acceptance"] == pytest.approx(16 / 28)
    assert s["spec_tps"] == pytest.approx(40 / (10 / 20 + 30 / 30))
    assert s["k_counts"] == Counter({0: 1, 4: 2, 2: 1, 1: 20})


def test_task_names_and_bad_input():
    assert {t.kind for t in spec_tasks.by_name("code")} == {"code"}
    assert len(spec_tasks.by_name("all")) == len(spec_tasks.TASKS) >= 9
    with pytest.raises(ValueError, match="unknown task"):
        spec_tasks.by_name("no-such-task")
    with pytest.raises(ValueError, match="kind"):
        spec_tasks.Task("x", "poetry", "i", "b")
