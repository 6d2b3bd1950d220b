"""pyllamakv as a drop-in for llama_cpp (llama-cpp-python 0.3.36): the imports its
README, docs, examples and tests write, and the methods and behaviours of its
Llama, each beside the llama-cpp-python shape it mirrors."""
from __future__ import annotations

import json
import pickle
import random

import numpy as np
import pytest

# import lines of llama-cpp-python's README, docs/, examples/ and tests/ and of its API
# reference, with llama_cpp spelled pyllamakv
IMPORTS = """
import llama_cpp
from llama_cpp import Llama
import llama_cpp.llama_tokenizer
import llama_cpp.llama_types as llama_types
import llama_cpp.llama_chat_format as llama_chat_format
from llama_cpp import _internals as internals
from llama_cpp.server.app import create_app
import llama_cpp.server
from llama_cpp.llama_tokenizer import LlamaHFTokenizer
from llama_cpp.llama_tokenizer import LlamaTokenizer
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
from llama_cpp.llama_speculative import LlamaDraftModel
from llama_cpp.llama_chat_format import MoondreamChatHandler
from llama_cpp.llama_chat_format import Llava15ChatHandler
from llama_cpp.llama_chat_format import Llava16ChatHandler
from llama_cpp.llama_chat_format import NanoLlavaChatHandler
from llama_cpp.llama_chat_format import MiniCPMv26ChatHandler
from llama_cpp.llama_chat_format import Qwen25VLChatHandler
from llama_cpp.llama_chat_format import Gemma4ChatHandler
from llama_cpp.llama_chat_format import hf_tokenizer_config_to_chat_formatter
from llama_cpp.llama_chat_format import Jinja2ChatFormatter
from llama_cpp.llama_chat_format import register_chat_format
from llama_cpp.llama_chat_format import get_chat_completion_handler
from llama_cpp.llama_chat_format import ChatFormatterResponse
from llama_cpp.llama_chat_format import chatml_function_calling
from llama_cpp import mtmd_cpp
from llama_cpp import llama_cpp_ext
from llama_cpp import llama_cpp
import llama_cpp.mtmd_cpp
from llama_cpp import ChatCompletionRequestUserMessage
from llama_cpp import LlamaGrammar
from llama_cpp import LlamaCache
from llama_cpp import LlamaRAMCache
from llama_cpp import LlamaState
from llama_cpp import LogitsProcessor, LogitsProcessorList
from llama_cpp import StoppingCriteria, StoppingCriteriaList
from llama_cpp import LlamaTokenizer
from llama_cpp.llama_grammar import LlamaGrammar
from llama_cpp.llama_grammar import JSON_GBNF
from llama_cpp.llama_grammar import json_schema_to_gbnf
from llama_cpp.llama_grammar import SchemaConverter
from llama_cpp.llama_cache import LlamaDiskCache
from llama_cpp.llama_cache import BaseLlamaCache
from llama_cpp.llama_cache import LlamaRAMCache
from llama_cpp.llama_types import ChatCompletionRequestMessage
from llama_cpp.llama_types import CreateChatCompletionResponse
from llama_cpp.llama_types import ChatCompletionTool, ChatCompletionToolChoiceOption
from llama_cpp import LLAMA_POOLING_TYPE_MEAN, LLAMA_POOLING_TYPE_NONE
from llama_cpp import GGML_TYPE_Q8_0, GGML_TYPE_F16
from llama_cpp import LLAMA_SPLIT_MODE_NONE, LLAMA_SPLIT_MODE_LAYER
from llama_cpp import LLAMA_DEFAULT_SEED
from llama_cpp import llama_supports_gpu_offload
from llama_cpp import llama_print_system_info
from llama_cpp.llama_cpp import llama_backend_init
from llama_cpp import LLAMA_ROPE_SCALING_TYPE_YARN
""".strip().splitlines()


def test_there_are_54_import_lines():
    assert len(IMPORTS) >= 54


@pytest.mark.parametrize("line", IMPORTS)
def test_import_line_resolves(line):
    ns: dict = {}
    exec(line.replace("llama_cpp", "pyllamakv", 1), ns)     # the first is the package
    assert any(not k.startswith("__") for k in ns)


def test_stand_ins_raise_unsupported_feature_naming_themselves():
    import pyllamakv
    from pyllamakv import UnsupportedFeature
    from pyllamakv.llama_chat_format import Llava15ChatHandler, MoondreamChatHandler
    from pyllamakv.llama_grammar import SchemaConverter
    for cls in (Llava15ChatHandler, MoondreamChatHandler, SchemaConverter):
        with pytest.raises(UnsupportedFeature, match=cls.__name__):
            cls(clip_model_path="x")
    with pytest.raises(UnsupportedFeature, match="llama_decode"):
        pyllamakv.llama_cpp.llama_decode(None, None)
    with pytest.raises(UnsupportedFeature, match="mtmd_init_from_file"):
        pyllamakv.mtmd_cpp.mtmd_init_from_file
    assert pyllamakv.LLAMA_DEFAULT_SEED == 0xFFFFFFFF and pyllamakv.GGML_TYPE_Q8_0 == 8
    assert isinstance(pyllamakv.llama_print_system_info(), bytes)
    assert isinstance(pyllamakv.llama_supports_gpu_offload(), bool)


def test_import_stays_light():
    import subprocess
    import sys
    code = ("import sys, pyllamakv; print(sorted(m for m in sys.modules "
            "if m.startswith('pyllamakv.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "pyllamakv.llama" not in out and "pyllamakv.core" not in out


# ---------------------------------------------------------------- chat formats

MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Instruction"},
        {"role": "assistant", "content": "Model answer"}, {"role": "user", "content": "More"}]
NAMES = ["llama-2", "llama-3", "alpaca", "qwen", "vicuna", "oasst_llama", "baichuan-2",
         "baichuan", "openbuddy", "redpajama-incite", "snoozy", "phind", "intel", "open-orca",
         "mistrallite", "zephyr", "pygmalion", "chatml", "mistral-instruct", "chatglm3",
         "openchat", "saiga", "gemma", "functionary", "functionary-v1", "functionary-v2",
         "chatml-function-calling"]


def test_27_chat_format_names_are_accepted(path):
    from pyllamakv import Llama
    assert len(NAMES) == 27
    for name in NAMES:
        llm = Llama(path, vocab_only=True, chat_format=name)
        assert llm.chat_format == name


def test_named_formatters_match_llama_cpp_pythons_layouts():
    from pyllamakv import llama_chat_format as f
    r = f.format_mistral_instruct(messages=MSGS[1:])
    assert r.prompt == "[INST] Instruction [/INST]Model answer</s>[INST] More [/INST]"
    assert f.format_chatml(messages=MSGS).prompt == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nInstruction<|im_end|>\n"
        "<|im_start|>assistant\nModel answer<|im_end|>\n<|im_start|>user\nMore<|im_end|>\n"
        "<|im_start|>assistant\n")
    assert f.format_vicuna(messages=MSGS).prompt.endswith(
        "USER: Instruction ASSISTANT: Model answer</s>USER: More ASSISTANT:")
    assert f.format_llama3(messages=MSGS).stop == "<|eot_id|>"
    assert f.format_gemma(messages=MSGS).prompt.endswith("<start_of_turn>model\n")


def test_registered_format_and_handler(path):
    from pyllamakv import Llama
    from pyllamakv.llama_chat_format import (ChatFormatterResponse, get_chat_completion_handler,
                                             register_chat_format)
    tag = f"fmt-{random.randrange(10**9)}"

    @register_chat_format(tag)
    def fmt(messages, **kwargs):
        return ChatFormatterResponse(prompt="Q: " + messages[-1]["content"] + "\nA:",
                                     stop="\n")
    with Llama(path, n_ctx=256, chat_format=tag) as llm:
        r = llm.create_chat_completion([{"role": "user", "content": "Hi"}], max_tokens=4)
        assert r["choices"][0]["message"]["role"] == "assistant"
    seen = []

    def handler(llama, messages, **kw):
        seen.append(kw["max_tokens"])
        return get_chat_completion_handler(tag)(llama=llama, messages=messages, **kw)
    with Llama(path, n_ctx=256, chat_handler=handler) as llm:
        llm.create_chat_completion([{"role": "user", "content": "Hi"}], max_tokens=3)
    assert seen == [3]


def test_chat_format_reports_the_guess(path):
    from pyllamakv import Llama
    llm = Llama(path, vocab_only=True)
    assert llm.chat_format == "chat_template.default"     # SmolLM2's own template


# ---------------------------------------------------------------- Llama methods

@pytest.fixture(scope="module")
def llm(path):
    from pyllamakv import Llama
    with Llama(path, n_ctx=512, logits_all=True) as m:
        yield m


def test_vocab_only_tokenizes_without_weights(path, llm):
    from pyllamakv import Llama
    v = Llama(path, vocab_only=True)
    text = "Hello wörld %d" % random.randrange(10**6)
    assert v.tokenize(text.encode()) == llm.tokenize(text.encode())
    assert v.n_vocab() == llm.n_vocab() and v.token_eos() == llm.token_eos()
    with pytest.raises(RuntimeError, match="vocab_only"):
        v.eval([1, 2])
    # llama-cpp-python's shape: a vocab_only Llama owns a context handle until closed
    assert v._ctx.ctx is not None and llm._ctx.ctx is not None
    with pytest.raises(RuntimeError, match="vocab_only"):
        v.create_completion("Hi", max_tokens=1)
    v.close()
    assert v._ctx.ctx is None
    assert llm.tokenizer().detokenize(llm.tokenize(text.encode())) == text.encode()


def test_detokenize_prev_tokens(llm):
    ids = llm.tokenize(b"The quick brown fox jumps", add_bos=False)
    k = random.randrange(1, len(ids))
    assert llm.detokenize(ids[:k]) + llm.detokenize(ids[k:], prev_tokens=ids[:k]) == \
        llm.detokenize(ids)


def test_sample_at_a_position_and_static_helpers(llm):
    from pyllamakv import Llama
    ids = llm.tokenize(b"One, two, three, four")
    llm.reset()
    llm.eval(ids)
    i = random.randrange(len(ids))
    assert llm.sample(temp=0.0, idx=i) == int(np.argmax(llm.scores[i]))
    lp = Llama.logits_to_logprobs(llm.scores[i])
    assert lp.dtype == np.float32 and abs(np.exp(lp).sum() - 1) < 1e-3
    assert Llama.longest_token_prefix([1, 2, 3, 4], [1, 2, 5]) == 2
    assert list(llm.eval_tokens) == ids and len(llm.eval_logits) == len(ids)
    assert llm.n_batch == 512 and llm.pooling_type() in (-1, 0, 1, 2, 3, 4)


def test_set_seed_and_state_repeat_a_sampled_completion(llm):
    llm.set_seed(random.randrange(2**32))
    state = llm.save_state()
    kw = dict(max_tokens=8, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    a = llm("Pick a word:", **kw)["choices"][0]["text"]
    llm("Pick a word:", **kw)
    llm.load_state(state)
    assert llm("Pick a word:", **kw)["choices"][0]["text"] == a


def test_generate_with_grammar_processor_and_stopping_criteria(llm):
    from pyllamakv import LlamaGrammar, LogitsProcessorList, StoppingCriteriaList
    ids = llm.tokenize(b"Answer yes or no:")
    g = LlamaGrammar.from_string('root ::= "yes" | "no"')
    out = []
    for t in llm.generate(ids, temp=0.8, grammar=g):
        if t == llm.token_eos():
            break
        out.append(t)
    assert llm.detokenize(out) in (b"yes", b"no")
    banned = random.randrange(100, 1000)

    def ban(input_ids, logits):
        logits[banned] = -np.inf
        return logits
    stop_at = random.randrange(2, 6)
    crit = StoppingCriteriaList([lambda input_ids, logits: len(input_ids) >= len(ids) + stop_at])
    got = list(llm.generate(ids, temp=0.0, logits_processor=LogitsProcessorList([ban]),
                            stopping_criteria=crit))
    assert len(got) == stop_at and banned not in got    # the token that fired is dropped


def test_pickle_rebuilds_the_llama(path):
    from pyllamakv import Llama
    with Llama(path, n_ctx=128, seed=7) as a:
        b = pickle.loads(pickle.dumps(a))
        assert b.n_ctx() == 128 and b.model_path == a.model_path
        assert b("Hi", max_tokens=3, temperature=0)["choices"][0]["text"] == \
            a("Hi", max_tokens=3, temperature=0)["choices"][0]["text"]
        b.close()


def test_openai_v1_types(llm):
    pytest.importorskip("openai")
    r = llm.create_chat_completion_openai_v1([{"role": "user", "content": "Hi"}], max_tokens=3)
    assert type(r).__name__ == "ChatCompletion" and r.choices[0].message.role == "assistant"
    chunks = list(llm.create_chat_completion_openai_v1([{"role": "user", "content": "Hi"}],
                                                       max_tokens=3, stream=True))
    assert type(chunks[0]).__name__ == "ChatCompletionChunk"


def test_disk_cache_round_trip(tmp_path, llm):
    pytest.importorskip("diskcache")
    from pyllamakv import LlamaDiskCache
    cache = LlamaDiskCache(str(tmp_path / "c"), capacity_bytes=1 << 30)
    ids = llm.tokenize(b"A cached prompt")
    llm.reset()
    llm.eval(ids)
    cache[ids] = llm.save_state()
    state = cache[ids + [5]]
    assert state.n_tokens == len(ids) and (ids + [5]) in cache and [12345] not in cache


# ---------------------------------------------------------------- behaviour

def test_chat_logprobs_in_openai_layout(llm):
    r = llm.create_chat_completion([{"role": "user", "content": "Hi"}], max_tokens=4,
                                   logprobs=True, top_logprobs=2, temperature=0)
    lp = r["choices"][0]["logprobs"]
    assert set(lp) == {"content", "refusal"} and len(lp["content"]) == \
        r["usage"]["completion_tokens"]
    first = lp["content"][0]
    assert set(first) == {"token", "logprob", "bytes", "top_logprobs"}
    assert first["logprob"] <= 0 and first["top_logprobs"][0]["logprob"] >= first["logprob"] - 1e-6


def test_text_offset_starts_at_the_prompts_length(llm):
    prompt = "Count: one, two,"
    lp = llm(prompt, max_tokens=3, logprobs=1, temperature=0)["choices"][0]["logprobs"]
    assert lp["text_offset"][0] == len(prompt)
    echo = llm(prompt, max_tokens=3, logprobs=1, temperature=0, echo=True)["choices"][0]
    assert echo["logprobs"]["text_offset"][-3:] == lp["text_offset"]


def test_penalties_count_generated_tokens_only(llm):
    word = random.choice(["apple", "river", "cloud"])
    prompt = f"{word} {word} {word} {word} {word}"
    plain = llm(prompt, max_tokens=1, temperature=0)["choices"][0]["text"]
    pen = llm(prompt, max_tokens=1, temperature=0, repeat_penalty=10.0,
              presence_penalty=5.0, frequency_penalty=5.0)["choices"][0]["text"]
    assert pen == plain                    # the first token sees no history
    ids = llm.tokenize(prompt.encode())
    gen = []
    for t in llm.generate(ids, temp=0.0, presence_penalty=100.0):
        gen.append(t)
        if len(gen) == 16:
            break
    assert len(set(gen)) == len(gen)       # generated tokens are penalised: none repeats


W = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
    "required": ["city"]}}}
T = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}}


def test_forced_tool_call_always_comes(llm):
    msgs = [{"role": "user", "content": "What's the weather in Paris?"}]
    seed = random.randrange(2**31)
    r = llm.create_chat_completion(msgs, tools=[W, T], max_tokens=48, seed=seed,
                                   tool_choice={"type": "function",
                                                "function": {"name": "get_time"}})
    (call,) = r["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "get_time"
    assert set(json.loads(call["function"]["arguments"])) == {"zone"}
    r = llm.create_chat_completion(msgs, functions=[W["function"], T["function"]], seed=seed,
                                   function_call={"name": "get_weather"}, max_tokens=48)
    fc = r["choices"][0]["message"]["function_call"]
    assert fc["name"] == "get_weather" and set(json.loads(fc["arguments"])) == {"city"}
