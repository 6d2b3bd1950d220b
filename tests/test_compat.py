"""llama-cpp-python code on the default model: constructor and call arguments,
named chat formats, mirostat, logits processors and stopping criteria."""
import warnings

import numpy as np
import pytest



@pytest.fixture(scope="module")
def llm(path):
    from pyllamakv import Llama
    with Llama(path, n_ctx=256, seed=3) as m:
        yield m


def test_tuning_arguments_warn_once(path):
    from pyllamakv import Llama
    from pyllamakv.api import compat
    compat._warned.clear()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        Llama(path, n_ctx=64, n_threads_batch=2, last_n_tokens_size=32, numa=False).close()
        Llama(path, n_ctx=64, n_threads_batch=2).close()
    msgs = [str(x.message) for x in w]
    assert sum("n_threads_batch" in m for m in msgs) == 1
    assert sum("last_n_tokens_size" in m for m in msgs) == 1
    assert not any("numa" in m for m in msgs)          # the default value: silent


def test_unsupported_features_raise(path):
    from pyllamakv import Llama
    from pyllamakv.api.compat import UnsupportedFeature
    for kw in (dict(lora_path="x.gguf"), dict(kv_overrides={"a": 1})):
        with pytest.raises(UnsupportedFeature, match=next(iter(kw))):
            Llama(path, n_ctx=64, **kw)
    Llama(path, n_ctx=64, lora_path=None, lora_base=None, rpc_servers=None).close()
    with pytest.raises(TypeError, match="tokenizer must have"):   # (test_hf_tokenizer.py)
        Llama(path, n_ctx=64, tokenizer=object())
    with pytest.raises(TypeError, match="no_such_option"):
        Llama(path, n_ctx=64, no_such_option=1)


def test_call_arguments(llm):
    out = llm("Hello", max_tokens=4, tfs_z=1.0, temperature=0)
    assert out["object"] == "text_completion"
    with pytest.raises(TypeError, match="bogus"):
        llm("Hello", max_tokens=2, bogus=1)


def test_logits_processor_bans_tokens(llm):
    first = llm("The capital of France is", max_tokens=1, temperature=0)["choices"][0]["text"]
    banned = llm.tokenize(first.encode(), add_bos=False)[0]
    seen = []

    def ban(input_ids, scores):
        seen.append(len(input_ids))
        scores = scores.copy()
        scores[banned] = -np.inf
        return scores
    second = llm("The capital of France is", max_tokens=1, temperature=0,
                 logits_processor=[ban])["choices"][0]["text"]
    assert second != first and seen and seen[0] > 0


def test_stopping_criteria(llm):
    calls = []

    def stop_after_three(input_ids, logits):
        calls.append(1)
        return len(calls) >= 3
    out = llm("Once upon a time", max_tokens=20, temperature=0, stopping_criteria=[stop_after_three])
    # as llama-cpp-python: the token that made it fire is dropped
    assert out["choices"][0]["finish_reason"] == "stop" and out["usage"]["completion_tokens"] == 2
    full = llm("Once upon a time", max_tokens=3, temperature=0)["choices"][0]["text"]
    assert full.startswith(out["choices"][0]["text"]) and len(full) > len(out["choices"][0]["text"])


@pytest.mark.parametrize("mode", [1, 2])
def test_mirostat_runs_and_adapts(llm, mode):
    out = llm("Once upon a time", max_tokens=12, mirostat_mode=mode, mirostat_tau=3.0, seed=1)
    assert out["usage"]["completion_tokens"] >= 1
    from pyllamakv.engine.mirostat import Mirostat
    m = Mirostat(mode, 3.0, 0.5, 1000)
    rng = np.random.default_rng()
    probs = rng.dirichlet(np.full(1000, 0.1))
    ids, p = m.keep(np.arange(1000), probs)
    assert abs(p.sum() - 1) < 1e-9 and np.all(np.diff(p) <= 1e-15)
    mu = m.mu
    m.update(1e-6)                 # a surprising token lowers the bound
    assert m.mu < mu


@pytest.mark.parametrize("fmt,marker", [("llama-2", "[INST]"), ("llama-3", "<|start_header_id|>"),
                                        ("mistral-instruct", "[INST]"), ("zephyr", "<|user|>"),
                                        ("chatml", "<|im_start|>"), ("gemma", "<start_of_turn>")])
def test_named_chat_formats(path, fmt, marker):
    from pyllamakv import Llama
    with Llama(path, n_ctx=256, chat_format=fmt) as m:
        chat = m._chat.format([{"role": "system", "content": "Be brief."},
                               {"role": "user", "content": "Hi there"}])
        assert marker in chat.prompt and "Hi there" in chat.prompt and "Be brief." in chat.prompt
        r = m.create_chat_completion([{"role": "user", "content": "Hi"}], max_tokens=3)
        assert r["choices"][0]["message"]["role"] == "assistant"


def test_unknown_chat_format(path):
    from pyllamakv import Llama
    with pytest.raises(ValueError, match="llama-3"):
        Llama(path, n_ctx=64, chat_format="no-such-format")


def test_token_nl(llm):
    assert llm.detokenize([llm.token_nl()]) == b"\n"


def test_set_cache_restores_the_longest_prefix(path):
    from pyllamakv import Llama
    from pyllamakv.engine.cache import LlamaRAMCache
    with Llama(path, n_ctx=256, seed=1) as m:
        cache = LlamaRAMCache(capacity_bytes=64 << 20)
        m.set_cache(cache)
        prompt = "The history of the city of Rome begins"
        first = m(prompt, max_tokens=4, temperature=0)["choices"][0]["text"]
        assert prompt_tokens_cached(cache, m, prompt)
        m("Something else entirely, about boats", max_tokens=2, temperature=0)
        loaded = []
        orig = m.load_state
        m.load_state = lambda s: (loaded.append(s), orig(s))[1]
        again = m(prompt, max_tokens=4, temperature=0)["choices"][0]["text"]
        assert loaded and again == first


def prompt_tokens_cached(cache, m, prompt):
    state, n = cache.lookup(m.tokenize(prompt.encode()))
    return state is not None and n == len(m.tokenize(prompt.encode()))


def test_ram_cache_evicts_least_recent():
    from pyllamakv.engine.cache import LlamaRAMCache
    from pyllamakv.engine.state import LlamaState
    c = LlamaRAMCache(capacity_bytes=250)
    mk = lambda: LlamaState(np.zeros(1, np.int32), np.zeros((1, 1), np.float32), 1, b"x" * 100)
    c[[1, 2]], c[[3, 4]] = mk(), mk()
    c.lookup([1, 2, 9])                  # touch the first
    c[[5]] = mk()                        # over capacity: [3, 4] leaves
    assert [1, 2] in c and [5] in c and c.lookup([3, 4])[0] is None


def test_from_pretrained_with_a_stub_hub(monkeypatch, path):
    import sys
    import types
    from pyllamakv import Llama
    hub = types.ModuleType("huggingface_hub")
    hub.list_repo_files = lambda repo: ["README.md", "m-Q4_1.gguf", "m-Q8_0.gguf"]
    got = {}

    def download(repo, filename, local_dir=None, cache_dir=None):
        got.update(repo=repo, filename=filename)
        return path
    hub.hf_hub_download = download
    monkeypatch.setitem(sys.modules, "huggingface_hub", hub)
    with Llama.from_pretrained("org/m", "*Q4_1.gguf", n_ctx=64) as m:
        assert got == {"repo": "org/m", "filename": "m-Q4_1.gguf"} and m.n_ctx() == 64
    with pytest.raises(ValueError, match="2 files"):
        Llama.from_pretrained("org/m", "*.gguf")
