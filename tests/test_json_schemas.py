"""JSON-schema output with llama.cpp's conventions, on the default model.

Each schema of SCHEMAS is asked for through response_format (a fresh random
seed per run; a reply cut by max_tokens is retried with another, up to three); the reply must parse and validate (jsonschema) against the
schema read as llama.cpp reads it: objects with ``properties`` closed unless
``additionalProperties`` says otherwise. Whitespace between tokens is bounded
(at most two newlines and 20 spaces or tabs), so no reply runs off into blanks.
"""
from __future__ import annotations

import json
import random
import re

import pytest

jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("llguidance")

S = {"type": "string", "maxLength": 24}
SCHEMAS = {
    "flat": {"type": "object", "properties": {"name": S, "age": {"type": "integer"}},
             "required": ["name", "age"]},
    "optional_keys": {"type": "object", "properties": {"a": {"type": "integer"}, "b": S}},
    "nested": {"type": "object", "required": ["user"], "properties": {
        "user": {"type": "object", "required": ["id", "address"], "properties": {
            "id": {"type": "integer", "minimum": 1},
            "address": {"type": "object", "required": ["city", "zip"], "properties": {
                "city": S, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}}}}}},
    "array_of_ints": {"type": "array", "items": {"type": "integer"}, "minItems": 1,
                      "maxItems": 5},
    "array_of_objects": {"type": "array", "maxItems": 3, "items": {
        "type": "object", "required": ["x", "y"],
        "properties": {"x": {"type": "number"}, "y": {"type": "number"}}}},
    "enum": {"type": "object", "required": ["color"],
             "properties": {"color": {"enum": ["red", "green", "blue"]}}},
    "const": {"type": "object", "required": ["v"], "properties": {"v": {"const": 42}}},
    "anyof_null": {"type": "object", "required": ["unit"], "properties": {
        "unit": {"anyOf": [{"type": "string", "enum": ["celsius", "fahrenheit"]},
                           {"type": "null"}]}}},
    "anyof_objects": {"anyOf": [
        {"type": "object", "required": ["cat"], "properties": {"cat": S}},
        {"type": "object", "required": ["dog"], "properties": {"dog": {"type": "integer"}}}]},
    "oneof_types": {"type": "object", "required": ["v"],
                    "properties": {"v": {"oneOf": [{"type": "integer"}, {"type": "boolean"}]}}},
    "pattern_date": {"type": "object", "required": ["date"], "properties": {
        "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}}},
    "pattern_ident": {"type": "string", "pattern": "^[a-z][a-z0-9_]{2,10}$"},
    "boolean_and_null": {"type": "object", "required": ["ok", "err"],
                         "properties": {"ok": {"type": "boolean"}, "err": {"type": "null"}}},
    "number_bounds": {"type": "object", "required": ["p"], "properties": {
        "p": {"type": "integer", "minimum": 0, "maximum": 100}}},
    "refs": {"$defs": {"A": {"type": "object", "required": ["a"],
                             "properties": {"a": {"type": "integer"}}}},
             "type": "object", "required": ["a", "b"],
             "properties": {"a": {"$ref": "#/$defs/A"}, "b": {"type": "integer"}}},
    "open_object": {"type": "object", "properties": {"k": S}, "required": ["k"],
                    "additionalProperties": {"type": "integer"}, "maxProperties": 3},
    "tuple": {"type": "array", "prefixItems": [{"type": "integer"}, S], "items": False,
              "minItems": 2},
    "string_enum_array": {"type": "array", "maxItems": 4,
                          "items": {"enum": ["a", "b", "c"]}},
    "required_subset": {"type": "object", "required": ["must"], "properties": {
        "must": {"type": "integer"}, "may": {"type": "boolean"}, "also": S}},
    "deep_array": {"type": "object", "required": ["rows"], "properties": {
        "rows": {"type": "array", "maxItems": 3, "items": {
            "type": "array", "maxItems": 3, "items": {"type": "integer"}}}}},
    "any_object": {"type": "object", "maxProperties": 2,
                   "additionalProperties": {"type": ["integer", "boolean"]}},
    "string_lengths": {"type": "object", "required": ["code"], "properties": {
        "code": {"type": "string", "minLength": 3, "maxLength": 3}}},
}


@pytest.fixture(scope="module")
def llm(path):
    from pyllamakv import Llama
    with Llama(path, n_ctx=1024) as m:
        yield m


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_schema_output_validates(llm, name):
    from pyllamakv.api.grammar import llama_cpp_schema
    schema = SCHEMAS[name]
    # a run that ends by length (a 135M model at temperature 0.8 may write a free
    # key of open_object for 300 tokens: seed 2070535209) is the model's, not the
    # grammar's: the next fresh seed, up to three
    for _ in range(3):
        seed = random.randrange(2**31)
        r = llm.create_chat_completion(
            [{"role": "user", "content": f"Give an example JSON value ({name.replace('_', ' ')})."}],
            response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema}},
            max_tokens=300, temperature=0.8, seed=seed)
        choice = r["choices"][0]
        text = choice["message"]["content"]
        if choice["finish_reason"] != "length":
            break
    assert choice["finish_reason"] == "stop", (seed, text)
    value = json.loads(text)
    closed = {k: v for k, v in llama_cpp_schema(schema).items() if k != "x-guidance"}
    jsonschema.validate(value, closed)
    # bounded whitespace: never more than two newlines in a row, at most 20 blanks after
    assert not re.search(r"\n{3,}|[ \t]{21,}", text), (seed, text)


def test_objects_are_closed_unless_opened():
    from pyllamakv.api.grammar import llama_cpp_schema
    s = llama_cpp_schema(SCHEMAS["nested"])
    assert s["additionalProperties"] is False
    addr = s["properties"]["user"]["properties"]["address"]
    assert addr["additionalProperties"] is False
    extra = llama_cpp_schema(SCHEMAS["open_object"])["additionalProperties"]
    assert extra["type"] == "integer" and extra["maximum"] == 10**16 - 1   # 16 digits at most
    assert "additionalProperties" not in llama_cpp_schema({"type": "object"})
    both = llama_cpp_schema({"allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]})
    assert all("additionalProperties" not in p for p in both["allOf"])


def test_extra_keys_cannot_be_generated(llm):
    """A schema with one optional key: the reply has no other key, whatever the seed."""
    from pyllamakv import LlamaGrammar
    g = LlamaGrammar.from_json_schema({"type": "object", "properties": {"only": S}})
    out = llm("A JSON object with many keys: ", grammar=g, max_tokens=80, temperature=1.0,
              seed=random.randrange(2**31))["choices"][0]["text"]
    assert set(json.loads(out)) <= {"only"}
    loose = LlamaGrammar.from_json_schema({"type": "object", "properties": {"only": S}},
                                          conventions="json-schema")
    assert loose.definition != g.definition
