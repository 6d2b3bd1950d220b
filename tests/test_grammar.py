"""Structured output on the default model: GBNF grammars, JSON schemas, response_format."""
import json

import numpy as np
import pytest

from _smollm2 import require_model_path

llguidance = pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")

from pyllamakv.api.grammar import GrammarError, LlamaGrammar  # noqa: E402

PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "age": {"type": "integer", "minimum": 0, "maximum": 150}}}


@pytest.fixture(scope="module")
def llm():
    path = require_model_path()
    from pyllamakv import Llama
    with Llama(path, n_ctx=512, seed=7) as m:
        yield m


def test_gbnf_choice_is_obeyed_under_sampling(llm):
    g = LlamaGrammar.from_string('root ::= "yes" | "no" | "maybe so"')
    for seed in range(4):
        out = llm("Is water wet? Answer:", grammar=g, max_tokens=8, temperature=1.5, seed=seed)
        assert out["choices"][0]["text"] in ("yes", "no", "maybe so")
        assert out["choices"][0]["finish_reason"] == "stop"


def test_gbnf_repetition_and_classes(llm):
    g = LlamaGrammar.from_string('root ::= [0-9]{3} "-" [a-z]{1,5} "."')
    text = llm("Code:", grammar=g, max_tokens=24, temperature=1.0, seed=3)["choices"][0]["text"]
    import re
    assert re.fullmatch(r"[0-9]{3}-[a-z]{1,5}\.", text), text


def test_json_schema_output_validates(llm):
    g = LlamaGrammar.from_json_schema(json.dumps(PERSON))
    for seed in range(3):
        text = llm("A person as JSON:", grammar=g, max_tokens=48, temperature=0.8,
                   seed=seed)["choices"][0]["text"]
        jsonschema.validate(json.loads(text), PERSON)


def test_response_format_json_schema_in_chat(llm):
    msgs = [{"role": "user", "content": "Give me a person named Ann."}]
    r = llm.create_chat_completion(msgs, max_tokens=48, response_format={
        "type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}})
    jsonschema.validate(json.loads(r["choices"][0]["message"]["content"]), PERSON)
    assert r["object"] == "chat.completion"


def test_response_format_json_object(llm):
    msgs = [{"role": "user", "content": "Reply with a JSON object with a key 'ok'."}]
    r = llm.create_chat_completion(msgs, max_tokens=64, temperature=0,
                                   response_format={"type": "json_object",
                                                    "schema": {"type": "object", "maxProperties": 2,
                                                               "additionalProperties":
                                                                   {"type": "boolean"}}})
    assert isinstance(json.loads(r["choices"][0]["message"]["content"]), dict)


def test_grammar_streams_the_same_text(llm):
    g = LlamaGrammar.from_json_schema(PERSON)
    full = llm("JSON:", grammar=g, max_tokens=48, temperature=0)["choices"][0]["text"]
    parts = [c["choices"][0]["text"] for c in llm("JSON:", grammar=g, max_tokens=48,
                                                   temperature=0, stream=True)]
    assert "".join(parts) == full


def test_mask_matches_the_grammar():
    """The mask allows exactly the tokens whose bytes continue the grammar."""
    path = require_model_path()
    from pyllamakv.gguf.reader import GGUFFile
    from pyllamakv.api.grammar import GrammarConstraint
    from pyllamakv.text.tokenizer import Tokenizer
    tok = Tokenizer.from_metadata(GGUFFile(path).metadata)
    c = GrammarConstraint(LlamaGrammar.from_string('root ::= "ab" [0-9]'), tok, tok.n_vocab)
    allowed = np.nonzero(c.allowed())[0]
    pieces = [tok.token_to_piece(int(i), special=True) for i in allowed]
    # every allowed piece begins a string of the grammar; the canonical "ab" token is one
    strings = [b"ab" + bytes([d]) for d in b"0123456789"]
    assert pieces and all(any(s.startswith(p) for s in strings) for p in pieces)
    assert tok.encode("ab", add_bos=False)[0] in allowed
    c.accept(tok.encode("ab", add_bos=False)[0])
    digits = [tok.token_to_piece(int(i), special=True) for i in np.nonzero(c.allowed())[0]]
    assert sorted(digits) == [str(d).encode() for d in range(10)]


@pytest.mark.parametrize("bad", ['root ::= "unterminated', "root ::= missing_rule", ""])
def test_bad_grammar_is_a_clear_error(bad):
    with pytest.raises(GrammarError):
        LlamaGrammar.from_string(bad)


def test_bad_schema_and_response_format(llm):
    with pytest.raises(GrammarError):
        LlamaGrammar.from_json_schema("{not json")
    with pytest.raises(GrammarError):
        llm.create_chat_completion([{"role": "user", "content": "x"}],
                                   response_format={"type": "yaml"})
    # the model still works afterwards
    assert llm("Hi", max_tokens=2)["choices"][0]["finish_reason"] in ("length", "stop")


# ---------------------------------------------------------------- GBNF as llama.cpp reads it

# the shape of llama.cpp's grammars/arithmetic.gbnf: every token ends in an open
# whitespace rule that also takes "\n", and a line ends with "\n"
LINES_GBNF = r"""
root ::= (sum "=" sp num "\n")+
sum  ::= num ([-+] num)*
num  ::= [0-9]+ sp
sp   ::= [ \t\n]*
"""


def _feed(grammar: LlamaGrammar, text: str):
    """Feeds text's tokens through a constraint; the index of the first refused one."""
    path = require_model_path()
    from pyllamakv.api.grammar import GrammarConstraint
    from pyllamakv.gguf.reader import GGUFFile
    from pyllamakv.text.tokenizer import Tokenizer
    tok = Tokenizer.from_metadata(GGUFFile(path).metadata)
    c = GrammarConstraint(grammar, tok, tok.n_vocab)
    for i, t in enumerate(tok.encode(text, add_bos=False)):
        if not c.allowed()[t]:
            return i, c
        c.accept(t)
    return None, c


def _lines(rng, n: int) -> str:
    sp = lambda: "".join(rng.choice([" ", "\t", "\n"]) for _ in range(rng.integers(0, 3)))
    out = []
    for _ in range(n):
        terms = [str(rng.integers(0, 1000)) + sp() for _ in range(rng.integers(1, 4))]
        ops = [str(rng.choice(["+", "-"])) for _ in terms[1:]]
        out.append(terms[0] + "".join(o + t for o, t in zip(ops, terms[1:]))
                   + "=" + sp() + str(rng.integers(0, 3000)) + sp() + "\n")
    return "".join(out)


def test_gbnf_open_whitespace_before_a_newline_ends_the_line():
    """llguidance alone makes ``num`` one greedy lexeme that eats the newline the
    line needs, so no second line could start; read as llama.cpp reads it
    (api/gbnf.py), every line of a random text of several passes."""
    rng = np.random.default_rng()
    g = LlamaGrammar.from_string(LINES_GBNF)
    for _ in range(5):
        text = _lines(rng, int(rng.integers(2, 5)))
        refused, c = _feed(g, text)
        assert refused is None, (text, refused)
    refused, _ = _feed(g, "12+3=15\n4*5=20\n")      # "*" is not in the grammar
    assert refused is not None


def test_gbnf_json_grammar_keeps_its_lexemes():
    """A JSON string before its trailing whitespace stays one lexeme (gbnf.py):
    the converted grammar still takes JSON, and the string head is a terminal."""
    from pyllamakv.api.gbnf import gbnf_to_lark
    from pyllamakv.llama_grammar import JSON_GBNF
    lark = gbnf_to_lark(JSON_GBNF)
    assert "STRING_HEAD:" in lark, lark
    value = {"k": [1, -2.5e3, "s \\\" t", None, True], "n": {"x": "y"}}
    refused, c = _feed(LlamaGrammar.from_string(JSON_GBNF), json.dumps(value, indent=1))
    assert refused is None
