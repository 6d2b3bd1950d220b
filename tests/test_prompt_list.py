"""create_completion over a list of prompts: one choice per prompt in order,
greedy texts equal to one call per prompt, whether the prompts run as
sequences of one context in batched decodes (n_seq_max > 1, also with a
streamed pool and more prompts than sequences) or one after another."""
from __future__ import annotations

import pytest

from pyllamakv import Llama, errors
from pyllamakv.core.native import Context

PROMPTS = ["The capital of France is", "1, 2, 3, 4,", "Once upon a time", "def add(a, b):",
           "Water boils at", [1, 504, 3458, 282]]   # the last one as token ids
KW = dict(n_ctx=160, n_threads=2)


@pytest.fixture(scope="module")
def reference(path):
    with Llama(path, **KW) as one:
        return [one.create_completion(p, max_tokens=10, temperature=0)["choices"][0]
                for p in PROMPTS]


@pytest.fixture
def batch_calls(monkeypatch):
    """Counts the scheduler's batched steps and the sequences each one held."""
    calls = []
    real = Context.decode_batch_logits

    def spy(self, tokens, seq_ids, want_logits=None):
        calls.append(len(set(seq_ids.tolist())))
        return real(self, tokens, seq_ids, want_logits)
    monkeypatch.setattr(Context, "decode_batch_logits", spy)
    return calls


@pytest.mark.parametrize("n_seq_max,pool", [(1, None), (3, None), (6, None), (4, 12.0)])
def test_prompt_list_equals_one_call_per_prompt(path, reference, batch_calls, n_seq_max, pool):
    with Llama(path, n_seq_max=n_seq_max, kv_pool_mib=pool, **KW) as llm:
        out = llm.create_completion(PROMPTS, max_tokens=10, temperature=0)
        assert [c["index"] for c in out["choices"]] == list(range(len(PROMPTS)))
        for got, ref in zip(out["choices"], reference):
            assert (got["text"], got["finish_reason"]) == (ref["text"], ref["finish_reason"])
        n_prompt = sum(len(llm.prompt_tokens(p)) for p in PROMPTS)
        assert out["usage"]["prompt_tokens"] == n_prompt
        assert out["usage"]["completion_tokens"] == 10 * len(PROMPTS)
        if n_seq_max == 1:
            assert batch_calls == []
        else:   # prefills and decode steps of several sequences in one call
            assert max(batch_calls) == min(n_seq_max, len(PROMPTS))
            assert len(batch_calls) < 11 * len(PROMPTS) / 2
        if pool is not None:
            assert llm.kv_stats(seq_id=1)["streaming"] == 1
        # streamed: the same texts, chunk by chunk, each with its prompt's index
        texts = [""] * len(PROMPTS)
        for chunk in llm.create_completion(PROMPTS, max_tokens=10, temperature=0, stream=True):
            choice = chunk["choices"][0]
            texts[choice["index"]] += choice["text"]
        assert texts == [r["text"] for r in reference]
        # the Llama's own sequence goes on as after a single call of the last group's first
        single = llm.create_completion(PROMPTS[0], max_tokens=10, temperature=0)
        assert single["choices"][0]["text"] == reference[0]["text"]


def test_prompt_list_seeded_sampling_and_errors(path):
    kw = dict(max_tokens=8, temperature=0.9, seed=7)
    with Llama(path, **KW) as one:
        ref = [one.create_completion(p, **kw)["choices"][0]["text"] for p in PROMPTS[:3]]
    with Llama(path, n_seq_max=3, **KW) as llm:
        got = [c["text"] for c in llm.create_completion(PROMPTS[:3], **kw)["choices"]]
        assert got == ref
        with pytest.raises(errors.ContextFullError):
            llm.create_completion(["hi", [5] * 200], max_tokens=4)
        with pytest.raises(errors.ParameterError, match="empty"):
            llm.create_completion(["hi", []], max_tokens=4)
        with pytest.raises(errors.ParameterTypeError):
            llm.create_completion(["hi", [1, "x"]], max_tokens=4)
        # still serving, same texts
        out = llm.create_completion(PROMPTS[:2], max_tokens=10, temperature=0)
        with Llama(path, **KW) as one:
            assert [c["text"] for c in out["choices"]] == [
                one.create_completion(p, max_tokens=10, temperature=0)["choices"][0]["text"]
                for p in PROMPTS[:2]]
    with pytest.raises(errors.ParameterError, match="n_seq_max"):
        Llama(path, n_seq_max=0, **KW)


def test_stopping_criteria_run_one_after_another(path, batch_calls):
    """stopping_criteria see each prompt's tokens as a single call would, so a list
    with them runs one prompt after another (no batched steps)."""
    def every_seventh(ids, logits):
        return len(ids) % 7 == 0
    with Llama(path, **KW) as one:
        ref = [one.create_completion(p, max_tokens=12, temperature=0,
                                     stopping_criteria=every_seventh)["choices"][0]
               for p in PROMPTS[:3]]
    with Llama(path, n_seq_max=3, **KW) as llm:
        out = llm.create_completion(PROMPTS[:3], max_tokens=12, temperature=0,
                                    stopping_criteria=every_seventh)
    assert max(batch_calls, default=1) == 1     # one sequence a step
    assert [(c["text"], c["finish_reason"]) for c in out["choices"]] == \
        [(r["text"], r["finish_reason"]) for r in ref]
    assert {r["finish_reason"] for r in ref} == {"stop"}
