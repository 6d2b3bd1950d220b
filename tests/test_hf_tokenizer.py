"""``Llama(tokenizer=LlamaHFTokenizer(...))``: a tokenizer other than the GGUF's
turns text into ids and back, as llama-cpp-python's Llama uses its tokenizer_
(the shape: ``Llama(model_path, tokenizer=LlamaHFTokenizer.from_pretrained(repo))``,
as for functionary models).

The tokenizer here is the default model's own byte-level vocabulary with no
merges, so every character is its own token: text tokenized by it differs
from the GGUF tokenizer's, and the test can tell which one ran."""
from __future__ import annotations

import random
import string

import pytest

from _smollm2 import metadata, require_model_path

tokenizers = pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def hf():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    vocab = {t: i for i, t in enumerate(metadata()["tokenizer.ggml.tokens"])}
    tok = Tokenizer(models.BPE(vocab, []))             # no merges: one token per byte
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


@pytest.fixture(scope="module")
def llm(hf):
    from pyllamakv import Llama
    from pyllamakv.llama_tokenizer import LlamaHFTokenizer
    with Llama(require_model_path(), n_ctx=256, tokenizer=LlamaHFTokenizer(hf)) as m:
        yield m


def test_text_goes_through_the_given_tokenizer(llm, hf):
    word = "".join(random.choices(string.ascii_letters, k=random.randint(5, 12)))
    ids = llm.tokenize(word.encode(), add_bos=False)
    assert ids == hf.encode(word).ids and len(ids) == len(word)
    assert llm.detokenize(ids) == word.encode()
    k = random.randrange(1, len(ids))
    assert llm.detokenize(ids[k:], prev_tokens=ids[:k]) == word[k:].encode()
    assert llm.tokenizer_.hf_tokenizer is hf


def test_completion_uses_it_both_ways(llm, hf):
    prompt = "The capital of France is"
    out = llm.create_completion(prompt, max_tokens=6, temperature=0)
    n_prompt = len(hf.encode(prompt).ids)
    assert out["usage"]["prompt_tokens"] == n_prompt == len(prompt)
    generated = llm.input_ids.tolist()[n_prompt:]
    # the text is the given tokenizer's decoding of the ids sampled (the last one
    # sampled is not evaluated, so it is not in input_ids)
    assert out["choices"][0]["text"].startswith(hf.decode(generated))
    streamed = "".join(c["choices"][0]["text"] for c in
                       llm.create_completion(prompt, max_tokens=6, temperature=0, stream=True))
    assert streamed == out["choices"][0]["text"]


def test_a_tokenizer_without_the_methods_is_refused():
    from pyllamakv import Llama
    with pytest.raises(TypeError, match="tokenize"):
        Llama(require_model_path(), vocab_only=True, tokenizer=object())
