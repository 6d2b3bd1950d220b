"""Tokenizer against llama.cpp: golden SmolLM2 ids, tiny hand-checked vocabs,
a reference SPM merge loop on random inputs, and streaming decode."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyllamakv.text.pretokenizer import pre_tokenizer, split_words
from pyllamakv.text.tokenizer import IncrementalDecoder, Tokenizer

from _smollm2 import golden_tokens, metadata

GOLDEN = golden_tokens()


@pytest.fixture(scope="module")
def smol() -> Tokenizer:
    return Tokenizer.from_metadata(metadata())


# --- SmolLM2 (gpt2 vocab, pre=smollm) against llama.cpp --------------------------

@pytest.mark.skipif(GOLDEN is None, reason="golden data missing: ../shared/golden/smollm2_tokens.json")
@pytest.mark.parametrize("case", GOLDEN["cases"] if GOLDEN else [], ids=lambda c: repr(c["text"])[:30])
def test_golden_ids(smol, case):
    assert GOLDEN["add_bos"] is False and GOLDEN["parse_special"] is True
    ids = smol.encode(case["text"], add_bos=False, special=True)
    assert ids == case["ids"]
    assert smol.decode(ids, special=True) == case["text"].encode("utf-8")


def test_smollm2_special_ids(smol):
    assert (smol.bos_id, smol.eos_id, smol.n_vocab) == (1, 2, 49152)
    assert smol.add_bos is False and smol.add_eos is False
    assert {0, 2} <= smol.eog_ids               # <|endoftext|>, <|im_end|>
    assert smol.is_eog(2) and not smol.is_eog(19556)
    assert smol.is_special(1) and not smol.is_special(19556)
    # add_bos follows the vocab: SmolLM2 asks for none
    assert smol.encode("Hello world", add_bos=True) == [19556, 905]


def test_special_parsing_on_off(smol):
    text = "<|im_start|>user\nHi<|im_end|>"
    on = smol.encode(text, add_bos=False, special=True)
    off = smol.encode(text, add_bos=False, special=False)
    assert on[0] == 1 and on[-1] == 2
    assert 1 not in off and 2 not in off
    assert smol.decode(off) == text.encode()          # plain text round-trips
    assert smol.decode(on) == b"user\nHi"             # control pieces hidden ...
    assert smol.decode(on, special=True) == text.encode()   # ... unless asked for
    assert smol.token_to_piece(2) == b"" and smol.token_to_piece(2, special=True) == b"<|im_end|>"


def test_add_bos_when_vocab_asks(smol):
    meta = dict(metadata())
    meta["tokenizer.ggml.add_bos_token"] = True
    tok = Tokenizer.from_metadata(meta)
    assert tok.encode("Hello world", add_bos=True) == [1, 19556, 905]
    assert tok.encode("Hello world", add_bos=False) == [19556, 905]


# SmolLM2's vocab lacks the byte tokens for 0x04 0x06 0x13 0x14 0x16 0x1d and for
# lead bytes 0xf1 and up (planes 4+); llama.cpp drops such bytes, so keep clear.
_TEXT = st.text(st.characters(max_codepoint=0x3FFFF, exclude_categories=("Cs",),
                              exclude_characters="\x04\x06\x13\x14\x16\x1d"), max_size=60)


@settings(max_examples=150, deadline=None)
@given(_TEXT)
def test_roundtrip_random_text(smol, text):
    ids = smol.encode(text, add_bos=False, special=False)
    assert smol.decode(ids) == text.encode("utf-8")


def test_streaming_decode_split_utf8(smol):
    text = "日本語のテキスト emoji 🤖🚀 naïve"
    ids = smol.encode(text, add_bos=False)
    pieces = [smol.token_to_piece(i) for i in ids]
    assert any(_invalid_utf8(p) for p in pieces), "test needs a character split across tokens"
    dec = IncrementalDecoder(smol)
    outs = [dec.feed(i) for i in ids]
    assert "".join(outs) + dec.flush() == text
    assert "\ufffd" not in "".join(outs)
    assert "" in outs                              # some token had to wait for the next


def test_streaming_flush_incomplete(smol):
    ids = smol.encode("🤖", add_bos=False)
    assert len(ids) > 1
    dec = IncrementalDecoder(smol)
    assert dec.feed(ids[:-1]) == ""
    assert dec.flush() == "\ufffd"


def test_bad_ids_raise(smol):
    with pytest.raises(ValueError, match="out of range"):
        smol.decode([49152])
    with pytest.raises(ValueError, match="out of range"):
        smol.token_to_piece(-1)


def _invalid_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


# --- pre-tokenizer regexes (hand-derived word lists) ------------------------------

@pytest.mark.parametrize("pre, text, words", [
    ("gpt-2", "Hello  world's 2024!!\n\n x", ["Hello", " ", " world", "'s", " 2024", "!!", "\n\n", " x"]),
    ("gpt-2", "a\tb", ["a", "\t", "b"]),
    ("smollm", "x 2024", ["x", " ", "2", "0", "2", "4"]),
    ("llama-bpe", "Hello world 12345\n\nok", ["Hello", " world", " ", "123", "45", "\n\n", "ok"]),
    ("llama-bpe", "IT'S ok", ["IT", "'S", " ok"]),
    ("qwen2", "ab 123", ["ab", " ", "1", "2", "3"]),
    ("default", "a+b=12345", ["a", "+", "b", "=", "123", "45"]),
])
def test_pre_tokenizer_words(pre, text, words):
    got = split_words(text, pre_tokenizer(pre).patterns)
    assert got == words
    assert "".join(got) == text


def test_unknown_pre_tokenizer_raises():
    with pytest.raises(ValueError, match="unknown pre-tokenizer"):
        pre_tokenizer("no-such-pre")


# --- tiny byte-level BPE vocab ----------------------------------------------------

def _tiny_bpe(pre: str = "gpt-2") -> Tokenizer:
    # ids:         0          1        2    3    4    5    6     7     8      9
    tokens = ["<|end|>", "<tool>", "a", "b", "c", "Ġ", "ab", "Ġa", "abc", "Ġab",
              "1", "2", "3", "12", "123", "Ġ1"]
    #          10   11   12   13    14     15
    types = [3, 4] + [1] * (len(tokens) - 2)
    merges = ["a b", "Ġ a", "Ġa b", "ab c", "1 2", "12 3", "Ġ 1"]
    return Tokenizer.from_metadata({
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": merges, "tokenizer.ggml.eos_token_id": 0,
        "tokenizer.ggml.bos_token_id": 0})


def test_tiny_bpe_hand_checked():
    tok = _tiny_bpe()
    # "ab": a b -> ab.  " abc": Ġ a b c -> (a b, rank 0) Ġ ab c -> (ab c, rank 3) Ġ abc
    assert tok.encode("ab abc", add_bos=False) == [6, 5, 8]
    # " ab": Ġ a b -> Ġ ab; no merge "Ġ ab" exists, so never Ġab (id 9)
    assert tok.encode(" ab", add_bos=False) == [5, 6]
    # gpt-2 keeps " 123" one word: Ġ 1 2 3 -> (1 2) Ġ 12 3 -> (12 3) Ġ 123
    assert tok.encode(" 123", add_bos=False) == [5, 14]
    # smollm splits digits first: " ", "1", "2", "3"
    assert _tiny_bpe("smollm").encode(" 123", add_bos=False) == [5, 10, 11, 12]
    assert tok.decode([6, 5, 8]) == b"ab abc"


def test_tiny_bpe_special_tokens():
    tok = _tiny_bpe()
    assert tok.encode("ab<|end|>", add_bos=False, special=True) == [6, 0]
    assert 0 not in tok.encode("ab<|end|>", add_bos=False, special=False)
    # user-defined tokens are split out even without special parsing (llama.cpp)
    assert tok.encode("a<tool>b", add_bos=False, special=False) == [2, 1, 3]
    assert tok.token_to_piece(1) == b"<tool>" and tok.token_to_piece(0) == b""
    assert tok.eog_ids == frozenset({0})        # eos, and "<|end|>" is an EOG text


# --- tiny SentencePiece vocab -----------------------------------------------------

def _byte_tokens() -> list[str]:
    return [f"<0x{b:02X}>" for b in range(256)]


def _spm(pieces: dict[str, float], add_space_prefix: bool = True) -> Tokenizer:
    tokens = ["<unk>", "<s>", "</s>"] + _byte_tokens() + list(pieces)
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)
    scores = [0.0, 0.0, 0.0] + [0.0] * 256 + list(pieces.values())
    return Tokenizer.from_metadata({
        "tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types, "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.add_space_prefix": add_space_prefix})


SPM_BASE = 259            # first normal piece after <unk>, <s>, </s> and 256 bytes


def test_tiny_spm_hand_checked():
    pieces = {"▁": -10.0, "a": -10.0, "b": -10.0, "c": -10.0, "ab": -1.0, "bc": -2.0,
              "▁a": -3.0, "abc": -4.0, "▁ab": -0.5}
    tok = _spm(pieces)
    pid = {p: SPM_BASE + i for i, p in enumerate(pieces)}
    assert tok.bos_id == 1 and tok.eos_id == 2 and tok.add_bos is True
    # "▁abc": best pair a+b (-1) -> ▁ ab c; then ▁+ab (-0.5) beats ab+c (-4) -> ▁ab c
    assert tok.encode("abc", add_bos=False) == [pid["▁ab"], pid["c"]]
    assert tok.encode("abc", add_bos=True) == [1, pid["▁ab"], pid["c"]]
    # "z" and "é" are not pieces: UTF-8 byte fallback
    assert tok.encode("z", add_bos=False) == [pid["▁"], 3 + 0x7A]
    assert tok.encode("é", add_bos=False) == [pid["▁"], 3 + 0xC3, 3 + 0xA9]
    assert tok.decode(tok.encode("é abc", add_bos=False)) == " é abc".encode()
    # a special token restarts the space prefix; unparsed, its text falls to bytes
    assert tok.encode("<s>abc", add_bos=False, special=True) == [1, pid["▁ab"], pid["c"]]
    assert tok.encode("<s>abc", add_bos=False, special=False) == [
        pid["▁"], 3 + ord("<"), 3 + ord("s"), 3 + ord(">"), pid["abc"]]
    assert _spm(pieces, add_space_prefix=False).encode("abc", add_bos=False) == [pid["abc"]]
    assert tok.token_to_piece(pid["▁ab"]) == b" ab" and tok.token_to_piece(3 + 0x41) == b"A"


def _spm_reference(pieces: dict[str, float], text: str) -> list[int]:
    """llama.cpp's SPM rule, restated: merge the best-scoring adjacent pair
    whose concatenation is a piece (leftmost on a tie) until none is left."""
    pid = {p: SPM_BASE + i for i, p in enumerate(pieces)}
    if not text:
        return []
    syms = list(("▁" + text).replace(" ", "▁"))
    while True:
        best = None
        for i in range(len(syms) - 1):
            cat = syms[i] + syms[i + 1]
            if cat in pieces and (best is None or pieces[cat] > best[0]):
                best = (pieces[cat], i)
        if best is None:
            break
        i = best[1]
        syms[i:i + 2] = [syms[i] + syms[i + 1]]
    out: list[int] = []
    for s in syms:
        out.extend([pid[s]] if s in pid else [3 + b for b in s.encode()])
    return out


def test_spm_matches_reference_on_random_vocabs():
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    for _ in range(20):
        alphabet = "▁abcd"
        pieces = {c: 0.0 for c in alphabet}
        while len(pieces) < 40:
            pieces["".join(rng.choice(alphabet) for _ in range(rng.randint(2, 5)))] = 0.0
        scores = rng.sample(range(-1000, 0), len(pieces))       # distinct
        pieces = {p: float(s) for p, s in zip(pieces, scores)}
        tok = _spm(pieces)
        for _ in range(20):
            text = "".join(rng.choice(" abcdzé") for _ in range(rng.randint(0, 24)))
            assert tok.encode(text, add_bos=False) == _spm_reference(pieces, text), \
                f"seed={seed} text={text!r}"
