"""Structured output: grammars and JSON schemas applied as a token mask.

The constrained decoding itself is llguidance's (an optional dependency, the
``grammar`` extra): it compiles a GBNF grammar (llama.cpp's format, what
llama-cpp-python users pass as ``LlamaGrammar.from_string``), a Lark grammar, a
regular expression or a JSON schema, and for each step computes the set of
tokens that keep the output inside the grammar. pyllamakv supplies the
vocabulary (every token's bytes, special tokens marked) and applies the set as
a mask in the sampler, after penalties and logit bias and before the filters:
tokens outside it get -inf.

    g = LlamaGrammar.from_string('root ::= "yes" | "no"')
    llm("Answer: ", grammar=g)
    llm.create_chat_completion(msgs, response_format={"type": "json_object"})

When the grammar is complete only the end-of-generation tokens stay allowed,
so the completion ends with finish_reason "stop".

llguidance is native code that recurses over a grammar: 10,000 chained GBNF
rules overflow its stack (a segfault, no exception). So a grammar's size, its
rule count and a JSON schema's nesting are bounded before it is handed over
(grammar_limits.py), and whatever llguidance raises (a pyo3 ``PanicException``
too) becomes GrammarError or ForeignLibraryError at the call.
"""
from __future__ import annotations

import json
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import contained
from .grammar_limits import GrammarError, check_grammar_text, check_schema


def _call(step: str, fn, *args, **kwargs):
    """fn(*args, **kwargs) of llguidance: its ValueError is a GrammarError
    naming step, anything else (a panic too) a ForeignLibraryError."""
    with contained("llguidance", step):
        try:
            return fn(*args, **kwargs)
        except ValueError as e:
            if isinstance(e, GrammarError):
                raise
            raise GrammarError(f"{step}: {e}") from e


def _llguidance():
    try:
        import llguidance
        import llguidance.numpy  # noqa: F401  (the mask helpers)
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise GrammarError("grammars and JSON schemas need llguidance: "
                           "pip install 'pyllamakv[grammar]'") from e
    return llguidance


class LlamaGrammar:
    """A compiled-on-use grammar, as llama-cpp-python's class of the same name.

    ``definition`` is llguidance's grammar text; each generation makes its own
    matcher from it, so one LlamaGrammar serves any number of calls."""

    def __init__(self, definition: str, source: str = "grammar") -> None:
        llg = _llguidance()
        err = _call(f"checking the {source}", llg.LLMatcher.validate_grammar, definition)
        if err:
            raise GrammarError(f"the {source} does not compile: {err}")
        self.definition = definition
        self.source = source

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True) -> "LlamaGrammar":
        """A GBNF grammar (llama.cpp's grammars/README.md), or Lark."""
        if not isinstance(grammar, str) or not grammar.strip():
            raise GrammarError("the grammar must be a non-empty string")
        check_grammar_text(grammar, "GBNF grammar")
        llg = _llguidance()
        from .gbnf import gbnf_to_lark, is_lark_syntax   # (imports llguidance)
        if not is_lark_syntax(grammar):   # GBNF, read as llama.cpp reads it (gbnf.py)
            try:
                grammar = gbnf_to_lark(grammar)
            except Exception as e:   # llguidance's GBNF parser raises plain Exception
                raise GrammarError(f"the GBNF grammar does not parse: {e}") from e
        return cls(_call("the GBNF grammar does not parse", llg.grammar_from, "lark", grammar),
                   "GBNF grammar")

    @classmethod
    def from_file(cls, file: str | Path, verbose: bool = True) -> "LlamaGrammar":
        try:
            text = Path(file).read_text()
        except OSError as e:
            raise GrammarError(f"cannot read grammar file {file}: {e}") from e
        return cls.from_string(text, verbose)

    @classmethod
    def from_json_schema(cls, json_schema: str | dict, verbose: bool = True, *,
                         conventions: str = "llama.cpp") -> "LlamaGrammar":
        """Output that parses as JSON and validates against the schema.

        conventions="llama.cpp" (the default) reads the schema as llama.cpp's
        json-schema-to-grammar does (llama_cpp_schema); "json-schema" as the JSON
        Schema standard does (objects open unless closed, any whitespace)."""
        if isinstance(json_schema, str):
            try:
                json_schema = json.loads(json_schema)
            except (json.JSONDecodeError, RecursionError) as e:
                raise GrammarError(f"the JSON schema is not valid JSON: {e}") from e
        if not isinstance(json_schema, (dict, bool)):
            raise GrammarError("a JSON schema must be an object (or true/false)")
        check_schema(json_schema)       # before anything walks it recursively
        if conventions == "llama.cpp":
            json_schema = llama_cpp_schema(json_schema)
        elif conventions != "json-schema":
            raise GrammarError(f"conventions must be 'llama.cpp' or 'json-schema', "
                               f"not {conventions!r}")
        defn = _call("the JSON schema does not convert", _llguidance().grammar_from,
                     "json_schema", json.dumps(json_schema))
        return cls(defn, "JSON schema")

    @classmethod
    def from_regex(cls, pattern: str) -> "LlamaGrammar":
        check_grammar_text(pattern, "regular expression")
        return cls(_call("the regular expression does not parse", _llguidance().grammar_from,
                         "regex", pattern), "regular expression")

    @classmethod
    def from_lark(cls, grammar: str) -> "LlamaGrammar":
        check_grammar_text(grammar, "Lark grammar")
        return cls(_call("the Lark grammar does not parse", _llguidance().grammar_from,
                         "lark", grammar), "Lark grammar")


# --- llama.cpp's reading of a JSON schema ---------------------------------------

# llama.cpp's json-schema-to-grammar allows, between tokens, nothing, one space, or
# one or two newlines and up to 20 spaces or tabs of indentation
LLAMA_CPP_WHITESPACE = r"(?:| |\n{1,2}[ \t]{0,20})"
LLAMA_CPP_INT_MAX = 10**16 - 1     # integers have at most 16 digits there
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")
_SUBSCHEMA_ONE = ("items", "additionalProperties", "not", "contains", "if", "then", "else")


def _close(node: Any, in_all_of: bool = False) -> Any:
    if isinstance(node, list):
        return [_close(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = dict(node)
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [_close(n) for n in out[key]]
    if isinstance(out.get("allOf"), list):     # parts of one object: closing each would
        out["allOf"] = [_close(n, True) for n in out["allOf"]]   # forbid the others' keys
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {k: _close(v) for k, v in out[key].items()}
    for key in _SUBSCHEMA_ONE:
        if isinstance(out.get(key), dict):
            out[key] = _close(out[key])
    types = out.get("type")
    if (types == "integer" or (isinstance(types, list) and "integer" in types)) and not any(
            k in out for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
        out["minimum"], out["maximum"] = -LLAMA_CPP_INT_MAX, LLAMA_CPP_INT_MAX
    if "properties" in out and "additionalProperties" not in out and not in_all_of \
            and "unevaluatedProperties" not in out:
        out["additionalProperties"] = False
    return out


def llama_cpp_schema(schema: Any) -> Any:
    """schema as llama.cpp's json-schema-to-grammar reads it, for llguidance: an
    object with ``properties`` and no ``additionalProperties`` is closed (no other
    keys), an integer without bounds has at most 16 digits, and whitespace between
    tokens is bounded (LLAMA_CPP_WHITESPACE) unless the schema sets llguidance's
    own ``x-guidance`` options."""
    if not isinstance(schema, dict):
        return schema
    out = _close(schema)
    out.setdefault("x-guidance", {"whitespace_pattern": LLAMA_CPP_WHITESPACE})
    return out


def response_format_grammar(response_format: Any) -> LlamaGrammar | None:
    """The grammar an OpenAI ``response_format`` asks for (None for plain text)."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict) or "type" not in response_format:
        raise GrammarError("response_format must be a dict with a 'type' "
                           "('text', 'json_object' or 'json_schema')")
    kind = response_format["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        # llama-cpp-python also takes a schema beside json_object
        return LlamaGrammar.from_json_schema(response_format.get("schema") or {"type": "object"})
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise GrammarError("response_format json_schema needs "
                               "{'json_schema': {'name': ..., 'schema': {...}}}")
        return LlamaGrammar.from_json_schema(spec["schema"])
    raise GrammarError(f"response_format type {kind!r} is not one of "
                       "'text', 'json_object', 'json_schema'")


# --- the vocabulary as llguidance sees it ----------------------------------------

class _Vocab:
    """What llguidance's TokenizerWrapper reads: every token's bytes (special
    tokens prefixed by 0xff, as llguidance expects), eos and bos, and a
    tokenize function."""

    def __init__(self, tokenizer, n_vocab: int) -> None:
        pieces = tokenizer.pieces
        self.tokens = [(b"\xff" + pieces[i]) if tokenizer.is_special(i) else pieces[i]
                       for i in range(tokenizer.n_vocab)]
        self.tokens += [b""] * (n_vocab - len(self.tokens))
        self.special_token_ids = [i for i in range(tokenizer.n_vocab) if tokenizer.is_special(i)]
        eog = sorted(tokenizer.eog_ids)
        self.eos_token_id = eog[0] if eog else (tokenizer.eos_id or 0)
        self.bos_token_id = tokenizer.bos_id
        self._tok = tokenizer
        self._byte_ids = {pieces[i]: i for i in range(tokenizer.n_vocab)
                          if tokenizer.is_byte_token(i)}

    def __call__(self, text: bytes) -> list[int]:
        """Ids of text as it continues the output: no BOS, no SentencePiece
        space prefix. Where those ids do not spell text (an SPM vocab without
        a lone U+2581 spells a space as the bytes of U+2581, as llama.cpp
        does), text's byte tokens if the vocab has them all."""
        ids = self._tok.encode_continuation(text)
        if self._tok.decode(ids, special=True) != bytes(text):
            byte_ids = [self._byte_ids.get(bytes([b])) for b in bytes(text)]
            if None not in byte_ids:
                return byte_ids
        return ids


_LLTOKENIZERS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def _lltokenizer(tokenizer, n_vocab: int):
    """llguidance's tokenizer for ours, built once per Tokenizer (~0.1-1 s)."""
    tok = _LLTOKENIZERS.get(tokenizer)
    if tok is None or tok.vocab_size != n_vocab:
        llg = _llguidance()
        wrap = _Vocab(tokenizer, n_vocab)
        tok = _call("reading the vocabulary", lambda: llg.LLTokenizer(
            llg.TokenizerWrapper(wrap), n_vocab=n_vocab, eos_token=sorted(tokenizer.eog_ids) or None))
        _LLTOKENIZERS[tokenizer] = tok
    return tok


class GrammarConstraint:
    """One generation's position in a grammar: masks logits, then advances by
    the sampled token."""

    def __init__(self, grammar: LlamaGrammar, tokenizer, n_vocab: int) -> None:
        llg = _llguidance()
        self.grammar = grammar
        self.n_vocab = int(n_vocab)
        self._m = _call(f"starting the {grammar.source}", llg.LLMatcher,
                        _lltokenizer(tokenizer, self.n_vocab), grammar.definition, log_level=0)
        if self._m.is_error():
            raise GrammarError(f"the {grammar.source} cannot start: {self._m.get_error()}")
        self._fill = llg.numpy.fill_next_token_bitmask
        self._bits = llg.numpy.allocate_token_bitmask(1, self.n_vocab)

    def allowed(self) -> np.ndarray:
        """(n_vocab,) bool: the tokens that keep the output in the grammar."""
        _call(f"masking tokens for the {self.grammar.source}", self._fill, self._m, self._bits)
        return np.unpackbits(self._bits.view(np.uint8), bitorder="little")[:self.n_vocab] \
            .astype(bool)

    def apply(self, logits: np.ndarray) -> None:
        """Set the logits of disallowed tokens to -inf, in place."""
        logits[~self.allowed()] = -np.inf

    def accept(self, token: int) -> None:
        if not _call(f"advancing the {self.grammar.source}", self._m.consume_token, int(token)):
            raise GrammarError(f"token {token} does not continue the {self.grammar.source}: "
                               f"{self._m.get_error()}")

    @property
    def done(self) -> bool:
        """The grammar is complete: only end-of-generation may follow."""
        return self._m.is_stopped()
