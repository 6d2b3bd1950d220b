"""Bounds on a grammar before llguidance sees it (see grammar.py).

llguidance walks grammars recursively in native code: a chain of 10,000 GBNF
rules (198 KB) overflows its stack and kills the process; a JSON schema
nested 500 deep overflows Python's recursion in json.dumps first. Real
grammars are far inside these limits (llama.cpp's bundled ones have at most
a few dozen rules; OpenAI caps a schema's nesting at 5 to 10 levels).
"""
from __future__ import annotations

import re
from typing import Any

from ..errors import LlamaKVError

MAX_GRAMMAR_BYTES = 128 << 10      # the text of a grammar or regular expression
MAX_GRAMMAR_RULES = 2000           # GBNF `name ::=` / Lark `name:` definitions
MAX_SCHEMA_DEPTH = 64              # nested objects / arrays of a JSON schema
MAX_SCHEMA_NODES = 100_000         # objects, arrays and values of a JSON schema

_LARK_RULE = re.compile(r"^[ \t]*[?!]?[A-Za-z_][\w]*(?:\.-?\d+)?[ \t]*:", re.M)


class GrammarError(LlamaKVError, ValueError):
    """A grammar or schema that does not compile, is too large, or output it cannot continue."""


def check_grammar_text(text: str, what: str) -> None:
    """GrammarError if text is longer, or defines more rules, than llguidance is safe with."""
    if not isinstance(text, str):
        raise GrammarError(f"the {what} must be a string, not {type(text).__name__}")
    n = len(text.encode("utf-8", "surrogatepass")) if not text.isascii() else len(text)
    if n > MAX_GRAMMAR_BYTES:
        raise GrammarError(f"the {what} is {n:,} bytes, over the limit of {MAX_GRAMMAR_BYTES:,}")
    rules = text.count("::=") + len(_LARK_RULE.findall(text))
    if rules > MAX_GRAMMAR_RULES:
        raise GrammarError(f"the {what} defines {rules:,} rules, over the limit of "
                           f"{MAX_GRAMMAR_RULES:,}")


def check_schema(schema: Any) -> None:
    """GrammarError if schema nests deeper than MAX_SCHEMA_DEPTH or has more
    than MAX_SCHEMA_NODES parts (walked without recursion)."""
    stack, nodes = [(schema, 1)], 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > MAX_SCHEMA_NODES:
            raise GrammarError(f"the JSON schema has more than {MAX_SCHEMA_NODES:,} parts")
        if isinstance(value, dict):
            items = value.values()
        elif isinstance(value, (list, tuple)):
            items = value
        else:
            continue
        if depth > MAX_SCHEMA_DEPTH:
            raise GrammarError(f"the JSON schema nests more than {MAX_SCHEMA_DEPTH} levels deep")
        stack.extend((v, depth + 1) for v in items)
