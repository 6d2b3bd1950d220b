"""Load cost grows linearly with the vocab, and no Python code runs per merge at load.

Counted, not timed: the Python lines executed (sys.settrace) while a GGUF
vocab is read and turned into a tokenizer. Work done in bulk (numpy, the
tokenizers library, one C call over a list) counts once; a Python loop over
tokens or merges counts per element, so a quadratic loop or a per-merge check
at load shows as growth in the count. The figures are deterministic.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest
from gguf import GGUFValueType as V

from fixtures import gguf_craft as gc
from pyllamakv.text import bpe_model
from pyllamakv.gguf.reader import GGUFFile
from pyllamakv.text.tokenizer import Tokenizer
from pyllamakv.gguf.vocab import byte_decoder

TEXT = "the quick brown fox 12 jumps over the lazy dog"


def lines_run(fn) -> int:
    """How many Python lines fn() executes (every frame, every module)."""
    count = 0

    def trace(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return trace

    old = sys.gettrace()
    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(old)
    return count


def gpt2_vocab(n_merges: int, seed: int = 0, long_token: int = 0):
    """A byte-level BPE vocab: GPT-2's 256 symbols, then n_merges tokens each
    made by merging two earlier ones (the merge list in that order), plus
    "<|end|>"; long_token > 0 adds one token (no merge) of that many chars."""
    rng = np.random.default_rng(seed)
    base = list(byte_decoder())
    tokens, seen, merges = list(base), set(base), []
    while len(merges) < n_merges:
        a, b = (tokens[int(i)] for i in rng.integers(0, len(tokens), 2))
        if a + b not in seen and len(a + b) < 12:
            tokens.append(a + b)
            seen.add(a + b)
            merges.append(f"{a} {b}")
    tokens.append("<|end|>")
    if long_token:
        tokens.append("ab" * (long_token // 2))
    types = [1] * len(tokens)
    types[len(base) + n_merges] = 3
    return tokens, types, merges


def gpt2_spec(tokens, types, merges) -> gc.Spec:
    return gc.Spec(kvs=[
        ["general.architecture", V.STRING, "llama", None],
        ["tokenizer.ggml.model", V.STRING, "gpt2", None],
        ["tokenizer.ggml.pre", V.STRING, "gpt-2", None],
        ["tokenizer.ggml.tokens", V.ARRAY, tokens, V.STRING],
        ["tokenizer.ggml.token_type", V.ARRAY, types, V.INT32],
        ["tokenizer.ggml.merges", V.ARRAY, merges, V.STRING],
        ["tokenizer.ggml.eos_token_id", V.UINT32, tokens.index("<|end|>"), None],
    ], tensors=[], data=b"")


def spm_spec(n_vocab: int, long_token: int = 0) -> gc.Spec:
    """A SentencePiece vocab: <unk> <s> </s>, the 256 byte tokens, then n_vocab
    distinct pieces of up to 8 letters (a base-26 count), scores falling."""
    pieces = []
    for i in range(n_vocab):
        k, text = i + 1, ""
        while k:
            k, d = divmod(k - 1, 26)
            text += chr(97 + d)
        pieces.append(("\u2581" if i % 3 == 0 else "") + text)
    if long_token:
        pieces[-1] = "ab" * (long_token // 2)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
    return gc.Spec(kvs=[
        ["general.architecture", V.STRING, "llama", None],
        ["tokenizer.ggml.model", V.STRING, "llama", None],
        ["tokenizer.ggml.tokens", V.ARRAY, tokens, V.STRING],
        ["tokenizer.ggml.scores", V.ARRAY, (-np.arange(len(tokens)) / 10).tolist(), V.FLOAT32],
        ["tokenizer.ggml.token_type", V.ARRAY, [2, 3, 3] + [6] * 256 + [1] * n_vocab, V.INT32],
        ["tokenizer.ggml.bos_token_id", V.UINT32, 1, None],
        ["tokenizer.ggml.eos_token_id", V.UINT32, 2, None],
        ["tokenizer.ggml.unknown_token_id", V.UINT32, 0, None],
    ], tensors=[], data=b"")


def load_and_encode(path):
    """The load (file, vocab, tokenizer) and the first encode, which builds the
    tokenizers-library model."""
    tok = Tokenizer.from_metadata(GGUFFile(path).metadata)
    return tok.encode(TEXT, add_bos=False)


def cost(spec: gc.Spec, path) -> int:
    gc.write(spec, path)
    load_and_encode(path)                 # imports, caches
    return lines_run(lambda: load_and_encode(path))


@pytest.mark.parametrize("kind", ["gpt2", "spm"])
def test_cost_linear_in_vocab_size(kind, tmp_path):
    make = (lambda n: gpt2_spec(*gpt2_vocab(n))) if kind == "gpt2" else spm_spec
    sizes = (1000, 2000, 4000)
    c = [cost(make(n), tmp_path / f"v{n}.gguf") for n in sizes]
    # each doubling adds about the same: linear, not n log n or n^2
    assert c[2] - c[1] <= 2.3 * (c[1] - c[0]), (kind, sizes, c)
    assert c[2] <= 4.6 * c[0], (kind, sizes, c)


@pytest.mark.parametrize("kind", ["gpt2", "spm"])
def test_cost_independent_of_token_length(kind, tmp_path):
    """One 40k- or 160k-character token: the same number of lines run (the
    SPM merges once sliced every cut of every entry: quadratic)."""
    def make(k):
        return gpt2_spec(*gpt2_vocab(500, long_token=k)) if kind == "gpt2" \
            else spm_spec(500, long_token=k)
    short, long = (cost(make(k), tmp_path / f"l{k}.gguf") for k in (40_000, 160_000))
    assert abs(long - short) <= 50, (kind, short, long)


def test_no_python_per_merge_at_load(tmp_path):
    """Tokenizer.from_metadata checks the vocab in bulk: 4x the merges, the same
    lines (the merges are split and checked when the first text is encoded,
    one list comprehension, and only a file with a bad merge is checked per line)."""
    counts = []
    for n in (1000, 4000):
        meta = GGUFFile(gc.write(gpt2_spec(*gpt2_vocab(n)), tmp_path / f"m{n}.gguf")).metadata
        Tokenizer.from_metadata(meta)
        counts.append(lines_run(lambda: Tokenizer.from_metadata(meta)))
    assert abs(counts[1] - counts[0]) <= 50, counts


def test_bad_merges_checked_per_line(tmp_path, monkeypatch):
    """A merge naming a text outside the vocab, one whose result is not an
    entry, and lines without or starting with a space: the tokenizers library
    refuses the bulk list, the lines are checked one by one, and the result
    tokenizes as the file without them does."""
    tokens, types, merges = gpt2_vocab(600, seed=5)
    a, b = next((a, b) for a, b in zip(tokens[300:], tokens[301:]) if a + b not in tokens)
    bad = ["zq9 x", f"{a} {b}", "nospace", " " + merges[3]]
    calls = []
    real = bpe_model._hf_models.BPE
    monkeypatch.setattr(bpe_model._hf_models, "BPE",
                        lambda vocab, m, **kw: calls.append(len(m)) or real(vocab, m, **kw))
    clean = Tokenizer.from_metadata(GGUFFile(gc.write(
        gpt2_spec(tokens, types, merges), tmp_path / "clean.gguf")).metadata)
    clean.encode(TEXT, add_bos=False)
    mixed = merges[:100] + bad[:2] + merges[100:400] + bad[2:] + merges[400:]
    dirty = Tokenizer.from_metadata(GGUFFile(gc.write(
        gpt2_spec(tokens, types, mixed), tmp_path / "dirty.gguf")).metadata)
    rng = np.random.default_rng(1)
    texts = [TEXT] + ["".join(rng.choice(list("abcdefgh xyz01"), 60)) for _ in range(20)]
    for t in texts:
        assert dirty.encode(t, add_bos=False) == clean.encode(t, add_bos=False), t
    # clean: one bulk call; dirty: the refused bulk call, then the checked lines
    assert calls == [600, len(mixed), 600], calls
