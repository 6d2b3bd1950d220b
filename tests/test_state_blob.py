"""save_state / load_state: a checksummed, versioned blob naming the model and
the context geometry; every check runs before anything is replaced."""
import dataclasses

import numpy as np
import pytest

from fixtures.tiny_models import write_tiny_model

from pyllamakv import errors


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("state")
    # b has a's shapes and metadata (the same KV layout), other random weights
    return (str(write_tiny_model(d / "a.gguf", seed=1, vocab=True)),
            str(write_tiny_model(d / "b.gguf", seed=2, vocab=True)))


@pytest.fixture(scope="module")
def llm(models):
    from pyllamakv import Llama
    with Llama(models[0], n_ctx=128, n_threads=1) as m:
        yield m


PROMPT = [1, 40, 41, 300, 7, 9, 12]
MORE = [33, 34]


def _saved(llm):
    llm.reset()
    llm.eval(PROMPT)
    return llm.save_state()


def _unchanged(llm, before_ids, before_last):
    """The refused load replaced nothing: tokens, logits and the next eval."""
    assert list(llm.input_ids) == before_ids
    np.testing.assert_array_equal(llm.scores[-1], before_last)


def _refused(llm, state, match):
    llm.reset()
    llm.eval([1, 5, 6])
    ids, last = list(llm.input_ids), llm.scores[-1].copy()
    with pytest.raises(errors.StateError, match=match):
        llm.load_state(state)
    _unchanged(llm, ids, last)


def test_round_trip_continues_like_the_original_and_flips_are_refused(llm):
    state = _saved(llm)
    llm.eval(MORE)
    want = llm.scores[-1].copy()
    llm.reset()
    llm.load_state(state)
    assert llm.n_tokens == len(PROMPT) and list(llm.input_ids) == PROMPT
    llm.eval(MORE)
    np.testing.assert_array_equal(llm.scores[-1], want)
    assert isinstance(state.llama_state, bytes) and state.llama_state_size == len(state.llama_state)
    rng = np.random.default_rng(3)
    for _ in range(5):
        blob = bytearray(state.llama_state)
        i = int(rng.integers(len(blob) // 4, len(blob) - 40))   # inside the KV bytes
        blob[i] ^= 1 << int(rng.integers(0, 8))
        _refused(llm, dataclasses.replace(state, llama_state=bytes(blob)), "checksum")


def test_truncated_or_foreign_blob_is_refused(llm):
    state = _saved(llm)
    blob = state.llama_state
    _refused(llm, dataclasses.replace(state, llama_state=blob[:-100]), "checksum|truncated")
    _refused(llm, dataclasses.replace(state, llama_state=b"X" + blob[1:]), "magic")
    _refused(llm, dataclasses.replace(state, llama_state=blob[:10]), "too short")
    v2 = bytearray(blob)
    v2[8] = 99
    _refused(llm, dataclasses.replace(state, llama_state=bytes(v2)), "version")


def test_state_of_another_model_with_the_same_layout_is_refused(llm, models):
    from pyllamakv import Llama
    with Llama(models[1], n_ctx=128, n_threads=1) as other:
        other.eval(PROMPT)
        state = other.save_state()
        assert len(state.llama_state) == len(_saved(llm).llama_state)
    _refused(llm, state, "different model")


@pytest.mark.parametrize("kw, what", [(dict(n_ctx=256), "n_ctx"), (dict(type_k="q8_0"), "type_k"),
                                      (dict(logits_all=True), "logits_all")])
def test_state_of_another_geometry_is_refused(llm, models, kw, what):
    from pyllamakv import Llama
    with Llama(models[0], **{"n_ctx": 128, "n_threads": 1, **kw}) as other:
        other.eval(PROMPT)
        state = other.save_state()
    _refused(llm, state, what)


def test_inconsistent_python_fields_are_refused_before_the_cache_changes(llm):
    state = _saved(llm)
    ids = state.input_ids.copy()
    ids[2] += 1
    _refused(llm, dataclasses.replace(state, input_ids=ids), "input_ids")
    _refused(llm, dataclasses.replace(state, n_tokens=state.n_tokens - 1), "n_tokens")
    _refused(llm, dataclasses.replace(state, input_ids=state.input_ids[:-1]), "input_ids")
    _refused(llm, dataclasses.replace(state, scores=state.scores + 1), "scores")
    _refused(llm, dataclasses.replace(state, scores=state.scores[:, :-1]), "scores")
    _refused(llm, "not a state", "LlamaState")


def test_logits_all_state_gives_the_prompt_logprobs(models):
    """A logits_all state restores every row: prompt logprobs after a load
    equal those of the original, none stale from the earlier contents."""
    from pyllamakv import Llama
    with Llama(models[0], n_ctx=128, n_threads=1, logits_all=True) as m:
        m.eval(PROMPT)
        state = m.save_state()
        want = m.scores.copy()
        m.reset()
        m.eval([2, 3, 4, 5, 6, 7, 8, 9, 10])
        m.load_state(state)
        np.testing.assert_array_equal(m.scores, want)
    with Llama(models[0], n_ctx=128, n_threads=1) as plain:
        plain.eval(PROMPT)
        last_only = plain.save_state()
    with Llama(models[0], n_ctx=128, n_threads=1, logits_all=True) as m:
        with pytest.raises(errors.StateError, match="logits_all"):
            m.load_state(last_only)
