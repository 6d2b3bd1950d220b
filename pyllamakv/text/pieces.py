"""Long texts cut into pieces for the tokenizers library, without changing a
single id: it is never handed a gigantic string.

BPE (gpt2 vocabs) merges only inside a pre-tokenizer word, so whole words go
in batches of about ``PIECE`` characters. SPM merges across the whole text,
but every merge builds a vocab entry, so a cut between two characters that
no vocab entry holds side by side is never crossed; cuts go just before a
U+2581 (an escaped space) whose preceding character no entry joins to it.

One endless word (no pre-tokenizer split, no safe SPM cut) is cut every
``LONG_WORD`` characters anyway: the library's memory grows by about 100
bytes per character of one word (50 MB of "x" aborts the process inside
it), so no word longer than that reaches it. Only such a word's ids can
differ from llama.cpp's, at the cuts: a word of 256k characters is not text.
"""
from __future__ import annotations

from typing import Iterable, Sequence

SPM_SPACE = "\u2581"   # '▁': SentencePiece's escaped space
PIECE = 1 << 16        # characters per piece (at least; pieces end at a safe cut)
LONG_WORD = 1 << 18    # the longest word or piece handed to the library in one call


def cut_long(words: list[str]) -> list[str]:
    """words, each longer than LONG_WORD cut into LONG_WORD-character parts."""
    if all(len(w) <= LONG_WORD for w in words):
        return words
    out: list[str] = []
    for w in words:
        out.extend(w[i:i + LONG_WORD] for i in range(0, max(len(w), 1), LONG_WORD))
    return out


def word_batches(words: list[str]) -> Iterable[list[str]]:
    """Consecutive words, PIECE characters or so at a time."""
    start = n = 0
    for i, w in enumerate(words):
        n += len(w)
        if n >= PIECE:
            yield words[start:i + 1]
            start, n = i + 1, 0
    if start < len(words):
        yield words[start:]


def glued_before_space(tokens: Sequence[str]) -> frozenset[str]:
    """Characters that some vocab entry holds just before a U+2581."""
    return frozenset(t[i - 1] for t in tokens for i in range(1, len(t)) if t[i] == SPM_SPACE)


def spm_pieces(text: str, glued: frozenset[str]) -> Iterable[str]:
    """text (spaces already U+2581) cut where no SPM merge can cross."""
    start = 0
    while len(text) - start > PIECE:
        cut = text.find(SPM_SPACE, start + PIECE)
        while cut > 0 and text[cut - 1] in glued:
            cut = text.find(SPM_SPACE, cut + 1)
        if cut < 0 or cut - start > LONG_WORD:
            cut = start + LONG_WORD if len(text) - start > LONG_WORD else -1
        if cut < 0:
            break
        yield text[start:cut]
        start = cut
    if start < len(text):
        yield text[start:]
