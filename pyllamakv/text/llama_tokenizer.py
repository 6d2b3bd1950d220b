"""llama-cpp-python's tokenizer objects: LlamaTokenizer (a Llama's own vocabulary)
and LlamaHFTokenizer (a Hugging Face ``tokenizers`` tokenizer, for models whose
GGUF tokenizer differs from the reference one, as with functionary).

Both have the same two methods a Llama needs, on bytes:
``tokenize(text, add_bos, special) -> ids`` and
``detokenize(ids, prev_tokens=None, special=False) -> bytes``. With
``prev_tokens`` the result is the text ``ids`` add after ``prev_tokens``
(decoding the two together and dropping the first part's bytes), so a
piece that depends on what precedes it (a SentencePiece leading space)
comes out as it would in the whole text.
"""
from __future__ import annotations

import abc
import codecs
from typing import Any, Sequence

from .tokenizer import IncrementalDecoder, Tokenizer


class BaseLlamaTokenizer(abc.ABC):
    @abc.abstractmethod
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> list[int]:
        ...

    @abc.abstractmethod
    def detokenize(self, tokens: Sequence[int], prev_tokens: Sequence[int] | None = None,
                   special: bool = False) -> bytes:
        ...


def suffix_bytes(decode, tokens: Sequence[int], prev_tokens: Sequence[int] | None) -> bytes:
    """What tokens add to the text of prev_tokens, by decode(ids) -> bytes."""
    if not prev_tokens:
        return decode(list(tokens))
    prev = decode(list(prev_tokens))
    whole = decode(list(prev_tokens) + list(tokens))
    return whole[len(prev):] if whole.startswith(prev) else decode(list(tokens))


class LlamaTokenizer(BaseLlamaTokenizer):
    """The vocabulary of a Llama (or of pyllamakv's text.tokenizer.Tokenizer)."""

    def __init__(self, llama) -> None:
        self.llama = llama
        self._tok = llama if isinstance(llama, Tokenizer) else llama.tokenizer

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> list[int]:
        return self._tok.encode(text, add_bos=add_bos, special=special)

    def detokenize(self, tokens: Sequence[int], prev_tokens: Sequence[int] | None = None,
                   special: bool = False) -> bytes:
        return suffix_bytes(self._decode(special), tokens, prev_tokens)

    def _decode(self, special: bool):
        tok = self._tok

        def decode(ids: list[int]) -> bytes:
            text = tok.decode(ids, special=special)
            # SentencePiece vocabularies: the space the tokenizer put before the
            # text is not part of it when the text starts after BOS (llama.cpp)
            if (ids and ids[0] == tok.bos_id and tok.kind == "llama"
                    and tok.vocab.add_space_prefix and text.startswith(b" ")):
                text = text[1:]
            return text
        return decode

    def encode(self, text: str, add_bos: bool = True, special: bool = True) -> list[int]:
        return self.tokenize(text.encode("utf-8", errors="ignore"), add_bos, special)

    def decode(self, tokens: Sequence[int]) -> str:
        return self.detokenize(tokens).decode("utf-8", errors="ignore")

    @classmethod
    def from_ggml_file(cls, path: str) -> "LlamaTokenizer":
        """The tokenizer of a GGUF file, from its metadata alone (no weights)."""
        from ..gguf.reader import GGUFFile
        f = GGUFFile(path)
        try:
            return cls(Tokenizer.from_metadata(f.metadata))
        finally:
            f.close()


class LlamaHFTokenizer(BaseLlamaTokenizer):
    """A ``tokenizers.Tokenizer`` (or a transformers tokenizer) behind the same methods."""

    def __init__(self, hf_tokenizer: Any) -> None:
        self.hf_tokenizer = hf_tokenizer

    def _encode(self, text: str, add_special_tokens: bool) -> list[int]:
        out = self.hf_tokenizer.encode(text, add_special_tokens=add_special_tokens)
        return list(getattr(out, "ids", out))

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> list[int]:
        return self._encode(text.decode("utf-8", errors="ignore"), add_bos)

    def detokenize(self, tokens: Sequence[int], prev_tokens: Sequence[int] | None = None,
                   special: bool = False) -> bytes:
        def decode(ids: list[int]) -> bytes:
            return self.hf_tokenizer.decode(ids, skip_special_tokens=not special).encode(
                "utf-8", errors="ignore")
        return suffix_bytes(decode, tokens, prev_tokens)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str) -> "LlamaHFTokenizer":
        """A tokenizer.json from a local directory or file, or a Hub repository."""
        from pathlib import Path

        from tokenizers import Tokenizer
        p = Path(pretrained_model_name_or_path)
        if p.is_dir():
            p = p / "tokenizer.json"
        if p.is_file():
            return cls(Tokenizer.from_file(str(p)))
        return cls(Tokenizer.from_pretrained(pretrained_model_name_or_path))


class CallableTokenizer(Tokenizer):
    """The Llama's Tokenizer, also callable as llama-cpp-python's ``llm.tokenizer()``
    (which returns a LlamaTokenizer)."""

    def __call__(self) -> LlamaTokenizer:
        return LlamaTokenizer(self)


# ---------------------------------------------------------------- Llama(tokenizer=...)

class TextOverride:
    """The Llama's vocabulary (special tokens, end-of-generation ids, pieces for
    grammars: everything but text) with a llama-cpp-python tokenizer object
    (``Llama(tokenizer=LlamaHFTokenizer...)``) turning text into ids and back, as
    llama-cpp-python's Llama does through its ``tokenizer_``. A chat prompt is
    tokenized whole (``special=True``): the split that keeps users' text from
    becoming control tokens (text.literal) is the GGUF tokenizer's, not the
    given one's."""

    def __init__(self, base: Tokenizer, text: BaseLlamaTokenizer) -> None:
        if not (callable(getattr(text, "tokenize", None))
                and callable(getattr(text, "detokenize", None))):
            raise TypeError("tokenizer must have llama-cpp-python's tokenize(text, add_bos, "
                            f"special) and detokenize(tokens, ...): {type(text).__name__}")
        self._base, self.text_tokenizer = base, text

    def __getattr__(self, name: str):
        return getattr(self._base, name)

    def __call__(self) -> BaseLlamaTokenizer:
        return self.text_tokenizer

    def encode(self, text: str | bytes, add_bos: bool = True, special: bool = False,
               max_tokens: int | None = None) -> list[int]:
        if max_tokens is not None:
            self._base.check_length(text, max_tokens)
        data = text.encode("utf-8", "replace") if isinstance(text, str) else bytes(text)
        return [int(t) for t in self.text_tokenizer.tokenize(data, add_bos, special)]

    def encode_segments(self, segments, add_bos: bool = True,
                        max_tokens: int | None = None) -> list[int]:
        return self.encode("".join(t for t, _ in segments), add_bos, True, max_tokens)

    def decode(self, ids: Sequence[int], special: bool = False) -> bytes:
        return self.text_tokenizer.detokenize(list(ids), special=special)


class SuffixDecoder:
    """IncrementalDecoder's interface over detokenize(ids, prev_tokens=...): each
    piece is the text the ids add after those before them (a tokenizer whose
    pieces depend on what precedes them decodes as in the whole text)."""

    def __init__(self, text: BaseLlamaTokenizer, special: bool = False) -> None:
        self._text, self._special, self._ids = text, special, []
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, ids: int | Sequence[int]) -> str:
        ids = [ids] if isinstance(ids, int) else [int(i) for i in ids]
        raw = self._text.detokenize(ids, prev_tokens=self._ids or None, special=self._special)
        self._ids += ids
        return self._utf8.decode(raw)

    def flush(self) -> str:
        return self._utf8.decode(b"", final=True)


def incremental_decoder(tokenizer, special: bool = False):
    """The streaming decoder of a Llama's tokenizer (TextOverride's, or the GGUF's)."""
    if isinstance(tokenizer, TextOverride):
        return SuffixDecoder(tokenizer.text_tokenizer, special)
    return IncrementalDecoder(tokenizer, special)


def llama_tokenizers(metadata: dict, kwargs: dict):
    """(llm.tokenizer, llm.tokenizer_) of a Llama made with kwargs from a file with
    metadata: the GGUF's vocabulary, with kwargs' ``tokenizer`` (llama-cpp-python's
    ``Llama(tokenizer=...)``) for text when there is one."""
    base = CallableTokenizer.from_metadata(metadata)
    given = kwargs.get("tokenizer")
    if given is None:
        return base, LlamaTokenizer(base)
    return TextOverride(base, given), given
