"""Prompts over the context are refused before tokenization (issue 20: a 50 MB
prompt took minutes to tokenize, or aborted inside the tokenizers library
under a memory limit), and long texts reach the tokenizers library in pieces
that change no id."""
from __future__ import annotations

import random

import pytest

from pyllamakv.text import pieces as text_pieces
from pyllamakv.errors import ContextFullError
from pyllamakv.text.tokenizer import Tokenizer

from _smollm2 import metadata, require_model_path

BIG = "hello world, " * (50_000_000 // 13)         # about 50 MB


class _Spy:
    """Stands in for the tokenizers library object: records what it is given."""

    def __init__(self, real):
        self.real, self.calls = real, []

    def encode(self, text, **kw):
        self.calls.append(sum(map(len, text)) if isinstance(text, list) else len(text))
        return self.real.encode(text, **kw)


@pytest.fixture(scope="module")
def smol() -> Tokenizer:
    return Tokenizer.from_metadata(metadata())


def _spy(monkeypatch, tok: Tokenizer) -> _Spy:
    spy = _Spy(tok._hf)
    monkeypatch.setattr(tok, "_hf", spy)
    return spy


def test_refused_without_tokenizing(monkeypatch, smol):
    spy = _spy(monkeypatch, smol)
    with pytest.raises(ContextFullError) as e:
        smol.encode(BIG, special=True, max_tokens=4096)
    assert isinstance(e.value, ValueError) and spy.calls == []
    msg = str(e.value)
    assert f"{len(BIG):,} bytes" in msg and "4,096 tokens" in msg
    assert f"{smol.max_token_bytes} bytes" in msg
    with pytest.raises(ContextFullError):              # bytes: the same bound
        smol.encode(BIG.encode(), max_tokens=4096)
    assert spy.calls == []
    assert smol.encode("Hi there", add_bos=False, max_tokens=4096) == \
        smol.encode("Hi there", add_bos=False)


def test_bound_never_refuses_a_text_that_fits(smol):
    """A token stands for at most max_token_bytes bytes, so a text that
    tokenizes to n tokens is never refused at max_tokens=n."""
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    specials = [smol.token_text(i) for i in sorted(smol.eog_ids)] + ["<|im_start|>"]
    words = ["the", " ", "  ", "\n", "Hello", "123456", "é", "日本語", "🙂", "    ", "\t",
             "supercalifragilistic"] + specials
    for _ in range(200):
        text = "".join(rng.choice(words) for _ in range(rng.randint(1, 60)))
        for special in (False, True):
            n = len(smol.encode(text, add_bos=False, special=special))
            smol.check_length(text, n)             # must not raise
    longest = max(range(smol.n_vocab), key=lambda i: len(smol.token_to_piece(i, True)))
    assert len(smol.token_to_piece(longest, True)) == smol.max_token_bytes
    exact = "a" * (smol.max_token_bytes * 10)
    smol.check_length(exact, 10)
    with pytest.raises(ContextFullError):
        smol.check_length(exact + "a", 10)


def _spm(pieces: list[str]) -> Tokenizer:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
    return Tokenizer.from_metadata({
        "tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [2, 3, 3] + [6] * 256 + [1] * len(pieces),
        "tokenizer.ggml.scores": [0.0] * 259 + [-float(i) for i in range(len(pieces))]})


def test_pieces_change_no_id(monkeypatch, smol):
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    alphabet = "▁abc"
    pieces = list(dict.fromkeys(list(alphabet) + ["".join(rng.choice(alphabet) for _ in
                                                  range(rng.randint(2, 5))) for _ in range(60)]))
    rng.shuffle(pieces)
    spm = _spm(pieces)           # entries like 'a▁b' and '▁▁' glue characters to a space
    texts = ["".join(rng.choice(" abcz é") for _ in range(rng.randint(0, 300))) for _ in range(40)]
    texts += ["Hello world, " * 40 + "x" * 50, "a" * 100, "   " * 30]
    want = {id(t): (smol.encode(t, special=True), spm.encode(t)) for t in texts}
    monkeypatch.setattr(text_pieces, "PIECE", 7)
    spy_b, spy_s = _spy(monkeypatch, smol), _spy(monkeypatch, spm)
    for t in texts:
        assert (smol.encode(t, special=True), spm.encode(t)) == want[id(t)], \
            f"seed={seed} text={t!r}"
    assert max(spy_b.calls) <= 100 and len(spy_b.calls) > len(texts)  # batches of whole words
    assert len(spy_s.calls) > len(texts)                      # cut where no merge crosses


@pytest.fixture(scope="module")
def llm():
    require_model_path()
    from pyllamakv import Llama
    with Llama(n_ctx=256, chat_format="chatml") as m:
        yield m


def test_llama_refuses_huge_prompts_before_tokenizing(monkeypatch, llm):
    spy = _spy(monkeypatch, llm.tokenizer)
    with pytest.raises(ContextFullError, match="256 tokens"):
        llm.create_completion(BIG, max_tokens=1)
    with pytest.raises(ContextFullError, match="256 tokens"):
        llm.create_completion(BIG.encode(), max_tokens=1)
    with pytest.raises(ContextFullError, match="256 tokens"):
        llm.create_chat_completion([{"role": "user", "content": BIG}], max_tokens=1)
    assert spy.calls == []
    monkeypatch.undo()
    out = llm.create_completion("The capital of France is", max_tokens=3, temperature=0)
    assert out["usage"]["completion_tokens"] >= 1     # the Llama is still usable
    assert llm._chat.source == "chat_format 'chatml'"
