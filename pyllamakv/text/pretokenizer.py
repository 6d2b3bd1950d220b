"""Pre-tokenizers: how a BPE vocab cuts text into words before merging.

llama.cpp names the pre-tokenizer of a GPT-2 style vocab with the GGUF key
``tokenizer.ggml.pre`` and, for each name, applies a short list of regexes in
turn: every regex re-splits every fragment the previous one produced, and both
the matches and the unmatched gaps between them are kept as words (nothing is
dropped). A regex never looks across a fragment boundary. This module holds
that table for the vocabs we support and the splitting rule; the patterns are
written for the ``regex`` package (``\\p{L}`` letters, ``\\p{N}`` numbers,
``\\s`` Unicode white space), which agrees with llama.cpp's own Unicode tables
up to the Unicode version each was built from.
"""
from __future__ import annotations

from dataclasses import dataclass

import regex

# --- patterns ---------------------------------------------------------------

# English contractions, ASCII-case-insensitive (llama3 / qwen2 style) or not
# (gpt-2). Spelled with classes: (?i:...) would also fold e.g. U+017F into 's'.
_CONTRACTIONS_CI = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_CONTRACTIONS = r"'s|'t|'re|'ve|'m|'ll|'d"

# GPT-2: contractions, optionally space-led runs of letters / numbers / other,
# and white space that is not followed by a non-space.
GPT2 = _CONTRACTIONS + r"| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"


def _llama3_like(numbers: str) -> str:
    # letters may be led by one non-letter non-digit (not a newline); symbols
    # keep trailing newlines; newline runs keep their leading blanks.
    return (_CONTRACTIONS_CI + r"|[^\r\n\p{L}\p{N}]?\p{L}+|" + numbers
            + r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


LLAMA3 = _llama3_like(r"\p{N}{1,3}")   # numbers in groups of up to three digits
QWEN2 = _llama3_like(r"\p{N}")         # every digit on its own


@dataclass(frozen=True, slots=True)
class PreTokenizer:
    name: str
    patterns: tuple[str, ...]     # applied in order, each to every fragment
    ignore_merges: bool = False   # a word already in the vocab is one token
    add_bos: bool | None = None   # default for tokenizer.ggml.add_bos_token


_DEFAULT = (r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]")
_DIGITS_THEN_GPT2 = (r"\p{N}", GPT2)

# name in tokenizer.ggml.pre -> (patterns, ignore_merges, add_bos default)
_TABLE: dict[str, tuple[tuple[str, ...], bool, bool | None]] = {}


def _register(names: str, patterns: tuple[str, ...], ignore_merges: bool = False,
              add_bos: bool | None = None) -> None:
    for name in names.split():
        _TABLE[name] = (patterns, ignore_merges, add_bos)


_register("default", _DEFAULT)
_register("gpt-2 phi-2 mpt olmo jais jina-es jina-de jina-v2-es jina-v2-de "
          "gigachat exaone4 trillion mellum", (GPT2,))
_register("llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral", (LLAMA3,),
          ignore_merges=True, add_bos=True)
_register("dbrx smaug-bpe chatglm-bpe glm4", (LLAMA3,))
_register("qwen2 deepseek-r1-qwen megrez stablelm2", (QWEN2,))
_register("smollm starcoder refact command-r codeshell exaone minerva-7b",
          _DIGITS_THEN_GPT2)
_register("falcon", (r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"))

_COMPILED: dict[str, regex.Pattern] = {}


def pre_tokenizer(name: str | None) -> PreTokenizer:
    """The pre-tokenizer llama.cpp uses for ``tokenizer.ggml.pre`` = name.

    A missing name means 'default' (llama.cpp warns that quality degrades);
    an unknown one raises ValueError, as llama.cpp refuses to load it.
    """
    key = name or "default"
    if key not in _TABLE:
        raise ValueError(f"unknown pre-tokenizer type {key!r} (tokenizer.ggml.pre); "
                         f"supported: {', '.join(sorted(_TABLE))}")
    patterns, ignore_merges, add_bos = _TABLE[key]
    return PreTokenizer(key, patterns, ignore_merges, add_bos)


def split_words(text: str, patterns: tuple[str, ...]) -> list[str]:
    """Cut text into words: each pattern re-splits every fragment, keeping
    matches and the gaps between them, in order; empty pieces are dropped."""
    fragments = [text] if text else []
    for pattern in patterns:
        compiled = _COMPILED.get(pattern)
        if compiled is None:
            compiled = _COMPILED[pattern] = regex.compile(pattern)
        out: list[str] = []
        for frag in fragments:
            pos = 0
            for m in compiled.finditer(frag):
                start, end = m.span()
                if start == end:
                    continue
                if start > pos:
                    out.append(frag[pos:start])
                out.append(frag[start:end])
                pos = end
            if pos < len(frag):
                out.append(frag[pos:])
        fragments = out
    return fragments
