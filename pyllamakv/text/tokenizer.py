"""Tokenizer: text <-> token ids exactly as llama.cpp does it, from GGUF metadata.

Two vocab kinds (``tokenizer.ggml.model``):

- ``gpt2``: byte-level BPE. Special tokens are split out first, the rest is cut
  into words by the pre-tokenizer named in ``tokenizer.ggml.pre`` (see
  pretokenizer.py), each word's UTF-8 bytes are mapped to GPT-2's printable
  byte alphabet and merged by the ranked ``tokenizer.ggml.merges``.
- ``llama``: SentencePiece-style. Spaces become U+2581, one is prefixed to each
  text fragment that starts the input or follows a special token (when
  ``add_space_prefix``), and adjacent pieces are merged greedily: always the
  pair whose concatenation is the highest-scoring vocab entry (leftmost on a
  tie). Characters left outside the vocab become ``<0xXX>`` byte tokens.

Both run on the ``tokenizers`` library's BPE model. For SPM we hand it, as
"merges", every split of every vocab entry into two vocab entries, ranked by
the entry's score; that reproduces llama.cpp's greedy rule except in two
corner cases no real vocab we know of hits: two *different* entries with
exactly equal scores competing for overlapping pairs (llama.cpp takes the
leftmost, we take the lower id), and a character that is not itself in the
vocab merging into a longer entry.

Long texts reach the tokenizers library in pieces (text_pieces.py): the same
ids, without handing it a gigantic string or word (pieces.py).
``encode(max_tokens=n)`` refuses, before any tokenizing, a text that must give
more than n tokens: a token stands for at most ``max_token_bytes`` bytes of the
text, counted as at most ``GUARD_TOKEN_BYTES`` (a vocab holding one 1 MB token
must not let a 50 MB prompt through to the tokenizer). Whatever the tokenizers
library raises (its pyo3 ``PanicException`` is a BaseException) becomes
``ForeignLibraryError`` here.

Decoding is the concatenation of per-token byte pieces (llama.cpp's
``token_to_piece``), so a UTF-8 character split across tokens comes out whole
once all its tokens are joined; ``IncrementalDecoder`` does that for streams.
"""
from __future__ import annotations

import codecs
from functools import cached_property
from typing import Iterable, Sequence

import numpy as np

from .bpe_model import build_bpe
from ..errors import ContextFullError, contained
from .pretokenizer import PreTokenizer, pre_tokenizer, split_words
from . import pieces as text_pieces
from .pieces import SPM_SPACE, cut_long, glued_before_space, spm_pieces, word_batches
from ..gguf.vocab import (BYTE, CONTROL, UNKNOWN, USER_DEFINED, NORMAL, Vocab,
                    byte_decoder)

GUARD_TOKEN_BYTES = 256    # the prompt-length guard counts no token as longer than this


class Tokenizer:
    """Encode / decode for one GGUF vocab. Build with ``from_metadata``."""

    def __init__(self, vocab: Vocab, pre: PreTokenizer | None) -> None:
        self.vocab = vocab
        self.kind = vocab.kind                   # 'gpt2' | 'llama'
        self.pre = pre                           # None for SPM
        # special tokens to split out of raw text, longest text first
        attrs = np.asarray(vocab.attrs)
        special = np.flatnonzero(np.isin(attrs, (CONTROL, USER_DEFINED, UNKNOWN)))
        self._special_order: list[int] = sorted(
            special.tolist(), key=lambda i: -len(vocab.tokens[i].encode()))

    @classmethod
    def from_metadata(cls, meta: dict) -> "Tokenizer":
        vocab = Vocab.from_metadata(meta)
        pre = pre_tokenizer(meta.get("tokenizer.ggml.pre")) if vocab.kind == "gpt2" else None
        if pre is not None and pre.add_bos is not None and "tokenizer.ggml.add_bos_token" not in meta:
            vocab.add_bos = pre.add_bos
        return cls(vocab, pre)

    @cached_property
    def _hf(self):
        """The tokenizers-library model, built at the first encode (it cannot
        fail on a vocab that loaded, and half of a load's time went into it)."""
        with contained("tokenizers", "building the vocab's BPE model"):
            return build_bpe(self.vocab, self.pre)

    # --- properties ------------------------------------------------------------

    @property
    def n_vocab(self) -> int:
        return self.vocab.n_vocab

    @property
    def bos_id(self) -> int | None:
        return self.vocab.bos_id

    @property
    def eos_id(self) -> int | None:
        return self.vocab.eos_id

    @property
    def eot_id(self) -> int | None:
        return self.vocab.eot_id

    @property
    def unk_id(self) -> int | None:
        return self.vocab.unk_id

    @property
    def eog_ids(self) -> frozenset[int]:
        """Ids that end generation: eos, eot, eom and llama.cpp's known texts."""
        return self.vocab.eog_ids

    @property
    def add_bos(self) -> bool:
        return self.vocab.add_bos

    @property
    def add_eos(self) -> bool:
        return self.vocab.add_eos

    def is_eog(self, token_id: int) -> bool:
        return token_id in self.vocab.eog_ids

    def is_special(self, token_id: int) -> bool:
        """Control, user-defined or unknown token (what special parsing splits out)."""
        return self.vocab.attrs[self._check(token_id)] in (CONTROL, USER_DEFINED, UNKNOWN)

    def is_byte_token(self, token_id: int) -> bool:
        """A <0xXX> byte token (SentencePiece's byte fallback)."""
        return self.vocab.attrs[self._check(token_id)] == BYTE

    def token_text(self, token_id: int) -> str:
        """The token's text as stored in the vocab (byte-level form for BPE)."""
        return self.vocab.tokens[self._check(token_id)]

    # --- encode ----------------------------------------------------------------

    def encode(self, text: str | bytes, add_bos: bool = True, special: bool = False,
               max_tokens: int | None = None) -> list[int]:
        """Token ids for text, as llama.cpp's llama_tokenize.

        add_bos: add the model's special tokens (BOS only if the vocab's
        add_bos is true, EOS only if its add_eos is) - llama-cpp-python's
        meaning of the flag. special: split control tokens (e.g. <|im_end|>)
        out of the text; user-defined tokens are split out either way.
        Bytes that are not valid UTF-8 are replaced by U+FFFD. max_tokens:
        raise ContextFullError, without tokenizing, if the text is too long
        to give max_tokens tokens or fewer.
        """
        if max_tokens is not None:
            self.check_length(text, max_tokens)
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8", "replace")
        v = self.vocab
        out: list[int] = []
        if add_bos and v.add_bos:
            if v.bos_id is None:
                raise ValueError("the vocab asks for a BOS token but has none")
            out.append(v.bos_id)
        self._encode_fragments(self._partition(text, special), out)
        if add_bos and v.add_eos:
            if v.eos_id is None:
                raise ValueError("the vocab asks for an EOS token but has none")
            out.append(v.eos_id)
        return out

    def encode_segments(self, segments: Sequence[tuple[str, bool]], add_bos: bool = True,
                        max_tokens: int | None = None) -> list[int]:
        """encode() of the segments' joined text, each segment with its own
        special parsing (text.literal: a chat prompt whose users' text must not
        become control tokens). SentencePiece's space prefix goes only where
        encode() of the whole text would put it."""
        text = "".join(t for t, _ in segments)
        if max_tokens is not None:
            self.check_length(text, max_tokens)
        if all(sp for _, sp in segments) or all(not sp for _, sp in segments):
            return self.encode(text, add_bos, special=bool(segments) and segments[0][1])
        v = self.vocab
        out: list[int] = [v.bos_id] if add_bos and v.add_bos and v.bos_id is not None else []
        prev_special = True
        for seg, special in segments:
            prev_special = self._encode_fragments(self._partition(seg, special), out, prev_special)
        if add_bos and v.add_eos and v.eos_id is not None:
            out.append(v.eos_id)
        return out

    def _encode_fragments(self, frags, out: list[int], prev_special: bool = True) -> bool:
        """Appends the ids of _partition's fragments to out: special ids as
        they are, text through _encode_raw (told whether a special token came
        just before it). Returns whether the last fragment was a special token."""
        for frag in frags:
            if isinstance(frag, int):
                out.append(frag)
                prev_special = True
            else:
                out.extend(self._encode_raw(frag, prev_special))
                prev_special = False
        return prev_special

    def is_control(self, token_id: int) -> bool:
        """A control token (what special parsing alone splits out of text)."""
        return self.vocab.attrs[self._check(token_id)] == CONTROL

    def encode_continuation(self, text: str | bytes) -> list[int]:
        """Ids of text as it continues earlier text: no BOS, no special
        parsing, and no SentencePiece space prefix (what a grammar engine
        asks for when it re-tokenizes forced bytes in mid-output)."""
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8", "replace")
        out: list[int] = []
        for frag in self._partition(text, False):
            out.extend([frag] if isinstance(frag, int) else self._encode_raw(frag, False))
        return out

    @cached_property
    def max_token_bytes(self) -> int:
        """The most bytes of text one token stands for (at least 4: a character
        outside the vocab becomes one unknown token)."""
        return max(4, max(map(len, self.pieces), default=0))

    def check_length(self, text: str | bytes, max_tokens: int) -> None:
        """ContextFullError if text must give more than max_tokens tokens."""
        n_bytes = len(text) if isinstance(text, (bytes, bytearray)) or text.isascii() \
            else len(text.encode("utf-8", "surrogatepass"))
        per_token = min(self.max_token_bytes, GUARD_TOKEN_BYTES)
        at_least = -(-n_bytes // per_token)
        if at_least > max_tokens:
            raise ContextFullError(
                f"the prompt is {n_bytes:,} bytes: at least {at_least:,} tokens (counting no "
                f"token as longer than {per_token} bytes), over the context window of "
                f"{max_tokens:,} tokens")

    def _partition(self, text: str, special: bool) -> list[str | int]:
        """Split special-token texts out of text, longest token first."""
        frags: list[str | int] = [text] if text else []
        attrs, tokens = self.vocab.attrs, self.vocab.tokens
        for tid in self._special_order:
            if not special and attrs[tid] != USER_DEFINED:
                continue
            tok = tokens[tid]
            if not any(isinstance(f, str) and tok in f for f in frags):
                continue
            new: list[str | int] = []
            for f in frags:
                if isinstance(f, int) or tok not in f:
                    new.append(f)
                    continue
                parts = f.split(tok)
                for k, part in enumerate(parts):
                    if k:
                        new.append(tid)
                    if part:
                        new.append(part)
            frags = new
        return frags

    def _encode_raw(self, text: str, prev_special: bool) -> list[int]:
        out: list[int] = []
        hf = self._hf
        if self.pre is not None:
            for words in word_batches(cut_long(split_words(text, self.pre.patterns))):
                with contained("tokenizers", "encoding text"):
                    out.extend(hf.encode(words, is_pretokenized=True,
                                         add_special_tokens=False).ids)
            return out
        if self.vocab.add_space_prefix and prev_special:
            text = " " + text
        text = text.replace(" ", SPM_SPACE)
        long = len(text) > text_pieces.PIECE
        for piece in spm_pieces(text, self._spm_glued) if long else [text] if text else []:
            with contained("tokenizers", "encoding text"):
                out.extend(hf.encode(piece, add_special_tokens=False).ids)
        return out

    @cached_property
    def _spm_glued(self) -> frozenset[str]:
        return glued_before_space(self.vocab.tokens)

    # --- decode ----------------------------------------------------------------

    @cached_property
    def pieces(self) -> list[bytes]:
        """Every token's bytes as llama.cpp's token_to_piece(special=True)."""
        v = self.vocab
        table = byte_decoder()
        out: list[bytes] = []
        for text, attr in zip(v.tokens, v.attrs):
            if attr in (CONTROL, USER_DEFINED, UNKNOWN):
                out.append(text.encode())
            elif attr == BYTE:
                out.append(bytes([int(text[3:5], 16)]))
            elif attr == NORMAL and self.kind == "llama":
                out.append(text.replace(SPM_SPACE, " ").encode())
            elif attr == NORMAL:
                out.append(b"".join(table.get(c) or c.encode() for c in text))
            else:                       # unused / undefined: nothing
                out.append(b"")
        return out

    def token_to_piece(self, token_id: int, special: bool = False) -> bytes:
        """The bytes one token stands for. Control and unknown tokens give b''
        unless special; user-defined tokens always give their text."""
        self._check(token_id)
        if not special and self.vocab.attrs[token_id] in (CONTROL, UNKNOWN):
            return b""
        return self.pieces[token_id]

    def decode(self, ids: Iterable[int], special: bool = False) -> bytes:
        """Concatenated pieces of ids (bytes: the end may be a partial character)."""
        return b"".join(self.token_to_piece(int(i), special) for i in ids)

    def _check(self, token_id: int) -> int:
        if not 0 <= token_id < self.vocab.n_vocab:
            raise ValueError(f"token id {token_id} out of range [0, {self.vocab.n_vocab})")
        return token_id


class IncrementalDecoder:
    """Feed token ids one or a few at a time; get text only once whole UTF-8
    characters are available. Invalid byte sequences become U+FFFD."""

    def __init__(self, tokenizer: Tokenizer, special: bool = False) -> None:
        self._tokenizer = tokenizer
        self._special = special
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, ids: int | Sequence[int]) -> str:
        if isinstance(ids, int):
            ids = (ids,)
        return self._utf8.decode(self._tokenizer.decode(ids, self._special))

    def flush(self) -> str:
        """Whatever is pending (an incomplete character becomes U+FFFD)."""
        return self._utf8.decode(b"", final=True)

    def reset(self) -> None:
        self._utf8.reset()
