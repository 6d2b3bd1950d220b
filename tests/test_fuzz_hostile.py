"""Fuzzing the untrusted inputs beside the GGUF file (issue 38): tokenizer
merges and vocab sizes, chat-template filters on hostile values, grammar
sizes. Every outcome is a result or one of the project's exceptions (an
Exception, never a bare BaseException such as a native library's panic),
within a deadline per example."""
from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pyllamakv.errors import LlamaKVError
from pyllamakv.gguf.reader import GGUFError
from pyllamakv.gguf.vocab import byte_decoder
from pyllamakv.text.chat import ChatFormatter, ChatTemplateError
from pyllamakv.text.tokenizer import Tokenizer

PROJECT = (LlamaKVError, GGUFError)
FAST = settings(max_examples=40, deadline=timedelta(seconds=20),
                suppress_health_check=[HealthCheck.too_slow], derandomize=False)
ALPHA = "ab \u0120c"
BYTES = list(byte_decoder())

token = st.text(ALPHA, min_size=1, max_size=4)


def _outcome(tok: Tokenizer, text: str) -> None:
    try:
        ids = tok.encode(text, add_bos=False)
    except PROJECT:
        return
    assert all(0 <= i < tok.n_vocab for i in ids)
    tok.decode(ids)


@FAST
@given(tokens=st.lists(token, min_size=1, max_size=40, unique=True),
       merges=st.lists(st.tuples(token, token).map(" ".join), max_size=40),
       with_bytes=st.booleans(), text=st.text(ALPHA + "xyz\u00e9", max_size=60))
def test_gpt2_merges_and_vocab_sizes(tokens, merges, with_bytes, text):
    vocab = (BYTES + [t for t in tokens if t not in BYTES]) if with_bytes else tokens
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": vocab,
            "tokenizer.ggml.merges": merges or ["a b"], "tokenizer.ggml.pre": "default"}
    try:
        tok = Tokenizer.from_metadata(meta)
    except PROJECT:
        return
    _outcome(tok, text)


@FAST
@given(pieces=st.lists(st.text("\u2581abc", min_size=1, max_size=6), min_size=0, max_size=60,
                       unique=True),
       n_bytes=st.integers(0, 256), text=st.text("abc d\u00e9", max_size=60))
def test_spm_vocab_sizes(pieces, n_bytes, text):
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(n_bytes)]
    tokens += [p for p in pieces if p not in tokens]
    n = len(tokens)
    meta = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.scores": [-float(i) for i in range(n)],
            "tokenizer.ggml.token_type": [2, 3, 3] + [6] * n_bytes + [1] * (n - 3 - n_bytes),
            "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2}
    try:
        tok = Tokenizer.from_metadata(meta)
    except PROJECT:
        return
    _outcome(tok, text)


FILTERS = ["urlize", "wordwrap", "indent", "center", "replace", "striptags", "title",
           "truncate", "wordcount", "format", "join", "tojson", "trim", "escape", "batch",
           "slice", "sort", "unique", "string", "list", "reverse", "capitalize", "int", "round"]
hostile = st.one_of(
    st.text(".()<>&@:/ wx\n", max_size=50).map(lambda s: s * 200),
    st.integers(-10**6, 10**6), st.just("." * 5000 + "a."), st.text(max_size=30))


@FAST
@given(name=st.sampled_from(FILTERS), value=hostile,
       args=st.lists(st.one_of(st.integers(-10**9, 10**9), st.text(max_size=5)), max_size=2))
def test_template_filters_on_hostile_values(name, value, args):
    call = f"v|{name}" + (f"({', '.join(map(repr, args))})" if args else "")
    template = "{% set v = messages[0].content %}{{ " + call + " }}"
    try:
        fmt = ChatFormatter(template, time_limit=1.0, max_output=1 << 20)
        fmt.format([{"role": "user", "content": value if isinstance(value, str) else str(value)}])
    except ChatTemplateError:
        pass


@settings(max_examples=25, deadline=timedelta(seconds=30))
@given(n=st.integers(1, 20_000), width=st.integers(1, 40), kind=st.sampled_from(["chain", "alt"]))
def test_grammar_sizes(n, width, kind):
    pytest.importorskip("llguidance")
    from pyllamakv.api.grammar import GrammarError, LlamaGrammar
    if kind == "chain":
        g = "root ::= r0\n" + "".join(f'r{i} ::= "{"a" * width}" r{i + 1}\n'
                                      for i in range(n)) + f'r{n} ::= "b"\n'
    else:
        g = "root ::= " + " | ".join(f'"{"a" * width}{i}"' for i in range(n)) + "\n"
    try:
        LlamaGrammar.from_string(g)
    except GrammarError:
        pass
