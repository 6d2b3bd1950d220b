"""llama_cpp.llama_grammar: grammars for constrained output (api/grammar.py).

``LlamaGrammar.from_string`` takes llama.cpp's GBNF (or llguidance's Lark);
``from_json_schema`` compiles a schema with llama.cpp's conventions (closed
objects, bounded whitespace). ``json_schema_to_gbnf`` returns grammar text
that ``LlamaGrammar.from_string`` accepts: a Lark rule embedding the schema
(``start: %json {...}``), since pyllamakv compiles schemas with llguidance,
not through GBNF; ``SchemaConverter`` (llama.cpp's schema-to-GBNF class) is
not provided.
"""
from __future__ import annotations

import json

from .api.compat import UnsupportedFeature
from .api.grammar import GrammarError, LlamaGrammar, llama_cpp_schema

__all__ = ["LlamaGrammar", "GrammarError", "JSON_GBNF", "json_schema_to_gbnf",
           "SchemaConverter", "LLAMA_GRAMMAR_DEFAULT_ROOT"]

LLAMA_GRAMMAR_DEFAULT_ROOT = "root"

# any JSON value with an object at the top (as llama.cpp's grammars/json.gbnf)
JSON_GBNF = r"""
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4})
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

ws ::= | " " | "\n" [ \t]{0,20}
"""


def json_schema_to_gbnf(schema: str, prop_order: list[str] | None = None) -> str:
    """Grammar text for schema (a JSON string) that LlamaGrammar.from_string takes.
    prop_order is not supported (llguidance keeps the schema's property order)."""
    if prop_order:
        raise UnsupportedFeature("json_schema_to_gbnf(prop_order=...): property reordering is "
                                 "not supported; order the schema's properties instead")
    obj = json.loads(schema) if isinstance(schema, str) else schema
    return "start: %json " + json.dumps(llama_cpp_schema(obj))


class SchemaConverter:
    """llama.cpp's JSON-schema-to-GBNF converter: not provided (see the module doc)."""

    def __init__(self, *args, **kwargs) -> None:
        raise UnsupportedFeature(
            "SchemaConverter: pyllamakv compiles JSON schemas with llguidance, not to GBNF; "
            "use LlamaGrammar.from_json_schema or json_schema_to_gbnf")
