"""Hostile grammars and schemas (issue 38): sizes that crash llguidance are
refused first, its exceptions are contained, and grammars work on a
SentencePiece vocab past the first token."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap

import pytest

llguidance = pytest.importorskip("llguidance")

from pyllamakv.api.grammar import GrammarError, LlamaGrammar  # noqa: E402
from fixtures import gguf_craft as gc  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _chain(n: int) -> str:
    return ("root ::= r0\n" + "".join(f'r{i} ::= "a" r{i + 1}\n' for i in range(n))
            + f'r{n} ::= "b"\n')


def test_ten_thousand_chained_rules_are_refused_not_a_segfault():
    n = 10_000 + random.randrange(100)
    code = textwrap.dedent(f"""
        from pyllamakv.api.grammar import GrammarError, LlamaGrammar
        g = "root ::= r0\\n" + "".join(f'r{{i}} ::= "a" r{{i + 1}}\\n' for i in range({n})) + 'r{n} ::= "b"\\n'
        try:
            LlamaGrammar.from_string(g)
        except GrammarError as e:
            print("refused:", e)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr[-1500:]
    assert "refused" in r.stdout


def test_many_rules_in_few_bytes_are_refused():
    n = 2500 + random.randrange(100)
    g = "root ::= r0\n" + "".join(f"r{i} ::= r{i + 1}\n" for i in range(n)) + f'r{n} ::= "b"\n'
    assert len(g) < 128 << 10
    with pytest.raises(GrammarError, match="rules"):
        LlamaGrammar.from_string(g)


def test_small_chains_still_compile():
    LlamaGrammar.from_string(_chain(random.randrange(10, 200)))


def test_huge_grammar_text_is_refused():
    g = 'root ::= "' + "a" * (200_000 + random.randrange(100)) + '"'
    with pytest.raises(GrammarError, match="bytes"):
        LlamaGrammar.from_string(g)


@pytest.mark.parametrize("depth", [500, 5000])
def test_deeply_nested_schema_is_a_grammar_error(depth):
    s: object = {"type": "string"}
    for _ in range(depth):
        s = {"anyOf": [s]}
    with pytest.raises(GrammarError, match="nests"):
        LlamaGrammar.from_json_schema(s)
    with pytest.raises(GrammarError):
        LlamaGrammar.from_json_schema("[" * 100_000)


@pytest.fixture(scope="module")
def spm_llm(tmp_path_factory):
    from pyllamakv import Llama
    path = gc.write_tiny_spm_llama(tmp_path_factory.mktemp("spm"))
    with Llama(str(path), n_ctx=256, seed=1, verbose=False) as llm:
        yield llm


def test_grammar_on_a_sentencepiece_vocab_past_the_first_token(spm_llm):
    g = LlamaGrammar.from_string('root ::= "ab cd " [a-j ]{2,20}')
    for seed in random.sample(range(1000), 3):
        text = spm_llm("hello", grammar=g, max_tokens=30, seed=seed,
                       temperature=1.0)["choices"][0]["text"]
        assert text.startswith("ab cd "), text


def test_json_object_on_a_sentencepiece_vocab(spm_llm):
    seed = random.randrange(1000)
    out = spm_llm.create_chat_completion([{"role": "user", "content": "hi"}], seed=seed,
                                         response_format={"type": "json_object"}, max_tokens=40)
    content = out["choices"][0]["message"]["content"]
    assert content.startswith("{"), content
    if out["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(content), dict)


def test_llguidance_panic_on_a_megabyte_token_is_a_project_error():
    """llguidance asserts (a pyo3 PanicException, a BaseException) on a vocab
    holding a 1 MB token; it must reach the caller as an Exception."""
    from pyllamakv.api.grammar import GrammarConstraint
    from pyllamakv.errors import ForeignLibraryError
    from pyllamakv.gguf.vocab import byte_decoder
    from pyllamakv.text.tokenizer import Tokenizer
    big = "y" * ((1 << 20) + random.randrange(100))
    t = Tokenizer.from_metadata({"tokenizer.ggml.model": "gpt2",
                                 "tokenizer.ggml.tokens": list(byte_decoder()) + [big, "<e>"],
                                 "tokenizer.ggml.merges": ["y y"], "tokenizer.ggml.pre": "default",
                                 "tokenizer.ggml.eos_token_id": 257})
    g = LlamaGrammar.from_string('root ::= "yy" [a-z]*')
    with pytest.raises((ForeignLibraryError, GrammarError)):
        GrammarConstraint(g, t, t.n_vocab).allowed()
