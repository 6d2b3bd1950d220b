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
