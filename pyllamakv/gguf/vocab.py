"""Vocab: the token table of a GGUF model and which tokens are special.

Reads the ``tokenizer.ggml.*`` metadata the way llama.cpp does: token types
become attributes, special ids come from their keys or the kind's defaults
(SPM: bos 1, eos 2, unk 0; GPT-2: bos = eos = 11), and, since converters do
not always record them, end-of-turn / FIM tokens are also found by their
text. Those found by text are treated as control tokens, and all of them
join the end-of-generation (EOG) set, as in llama.cpp.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable

import numpy as np

from .reader import GGUFError

# token types (tokenizer.ggml.token_type), used here as the token's attribute
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
_ATTRS = (NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE)
_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")

# texts llama.cpp takes as end-of-turn when no eot id is recorded
EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
             "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
             "<\uff5cend\u2581of\u2581sentence\uff5c>", "<end_of_utterance>")
# texts llama.cpp always adds to the EOG set
EOG_TEXTS = frozenset(EOT_TEXTS + (
    "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "</s>", "<|eom_id|>",
    "[EOS]", "<eos>", "<turn|>", "<|tool_response>", "[e~["))
# FIM tokens found by text; they end generation too
FIM_TEXTS = {
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}

_KINDS = {"gpt2": dict(bos=11, eos=11, unk=None, add_bos=False, space_prefix=False),
          "llama": dict(bos=1, eos=2, unk=0, add_bos=True, space_prefix=True)}


@dataclass(slots=True)
class Vocab:
    kind: str                       # 'gpt2' (byte-level BPE) | 'llama' (SPM)
    tokens: list[str]               # (n_vocab,) token texts
    attrs: list[int]                # (n_vocab,) NORMAL / CONTROL / ...
    scores: list[float]             # (n_vocab,) SPM merge priority (0 if absent)
    merges: list[str]               # BPE merges "left right", best first
    bos_id: int | None = None
    eos_id: int | None = None
    eot_id: int | None = None
    unk_id: int | None = None
    add_bos: bool = False
    add_eos: bool = False
    add_space_prefix: bool = False
    eog_ids: frozenset[int] = frozenset()
    text_to_id: dict[str, int] = field(default_factory=dict)   # first id per text

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)

    @classmethod
    def from_metadata(cls, meta: dict) -> "Vocab":
        """The vocab of GGUF metadata, each key checked (GGUFError naming it)."""
        kind = meta.get("tokenizer.ggml.model")
        if not isinstance(kind, str) or kind not in _KINDS:
            raise GGUFError(f"unsupported tokenizer.ggml.model {kind!r}: "
                            "supported are 'gpt2' (BPE) and 'llama' (SentencePiece)")
        tokens = _strings(meta, "tokenizer.ggml.tokens")
        if not tokens:
            raise GGUFError("tokenizer.ggml.tokens is missing or empty")
        tokens = list(tokens) if "" not in tokens else \
            [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
        n = len(tokens)
        types = _numbers(meta, "tokenizer.ggml.token_type", n, "iu")
        scores = _numbers(meta, "tokenizer.ggml.scores", n, "iuf")
        attrs = [NORMAL] * n if types is None else \
            np.where(np.isin(types, _ATTRS), types, 0).tolist()
        scores = [0.0] * n if scores is None else scores.astype(np.float64).tolist()
        _check_byte_tokens(tokens, attrs)
        merges = _strings(meta, "tokenizer.ggml.merges") or []
        if kind == "gpt2" and not merges:
            raise GGUFError("tokenizer.ggml.merges is missing for a gpt2 (BPE) vocab")
        for key, v in meta.items():
            if key.startswith("tokenizer.ggml.") and key.endswith("_token_id") and \
                    (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < n):
                raise GGUFError(f"{key} = {v!r} is not a token id of this vocab [0, {n})")
        # the first id per text: later (lower) ids overwrite
        text_to_id = dict(zip(reversed(tokens), range(n - 1, -1, -1)))

        d = _KINDS[kind]

        def special(key: str, default: int | None) -> int | None:
            v = meta.get(f"tokenizer.ggml.{key}_token_id")     # checked above
            if v is not None:
                return v
            return default if default is not None and default < n else None

        v = cls(kind, tokens, attrs, scores, merges,
                bos_id=special("bos", d["bos"]), eos_id=special("eos", d["eos"]),
                eot_id=special("eot", None), unk_id=special("unknown", d["unk"]),
                add_bos=_flag(meta, "add_bos_token", d["add_bos"]),
                add_eos=_flag(meta, "add_eos_token", False),
                add_space_prefix=_flag(meta, "add_space_prefix", d["space_prefix"]),
                text_to_id=text_to_id)
        eom = special("eom", None)
        v._find_eog(eom, {k: special(k, None) for k in FIM_TEXTS})
        return v

    def _find_eog(self, eom_id: int | None, fim: dict[str, int | None]) -> None:
        ids = self.text_to_id

        def by_text(texts: Iterable[str]) -> int | None:
            found = [ids[t] for t in texts if t in ids]
            for i in found:
                self.attrs[i] = CONTROL
            return min(found) if found else None

        if self.eot_id is None:
            self.eot_id = by_text(EOT_TEXTS)
        if eom_id is None:
            eom_id = by_text(("<|eom_id|>",))
        eog = set()
        for key, texts in FIM_TEXTS.items():
            fid = fim[key] if fim[key] is not None else by_text(texts)
            if fid is not None:
                eog.add(fid)
        for t in EOG_TEXTS:
            if t in ids:
                eog.add(ids[t])
                self.attrs[ids[t]] = CONTROL
        eog.update(i for i in (self.eos_id, self.eot_id, eom_id) if i is not None)
        self.eog_ids = frozenset(eog)


# ---------------------------------------------------------------- checks

def _strings(meta: dict, key: str) -> list[str] | None:
    v = meta.get(key)
    if v is not None and not (isinstance(v, list) and set(map(type, v)) <= {str}):
        raise GGUFError(f"{key} must be an array of strings")
    return v


def _numbers(meta: dict, key: str, n: int, kinds: str) -> np.ndarray | None:
    """meta[key] as an array of n numbers of the given numpy kinds, or None."""
    v = meta.get(key)
    if v is None:
        return None
    a = np.asarray(v) if isinstance(v, list) else np.zeros(0, object)
    what = "integers" if kinds == "iu" else "numbers"
    if a.ndim != 1 or a.dtype.kind not in kinds or len(a) and not np.isfinite(a).all():
        raise GGUFError(f"{key} must be an array of finite {what}")
    if len(a) != n:
        raise GGUFError(f"{key} has {len(a)} entries for {n} tokens")
    return a


def _flag(meta: dict, key: str, default: bool) -> bool:
    v = meta.get(f"tokenizer.ggml.{key}", default)
    if not isinstance(v, bool):
        raise GGUFError(f"tokenizer.ggml.{key} must be a bool, not {v!r}")
    return v


def _check_byte_tokens(tokens: list[str], attrs: list[int]) -> None:
    for i in np.flatnonzero(np.asarray(attrs) == BYTE).tolist():
        if not _BYTE_TOKEN.fullmatch(tokens[i]):
            raise GGUFError(f"tokenizer.ggml.tokens[{i}] = {tokens[i][:20]!r} is a byte token "
                            "(tokenizer.ggml.token_type 6) but not of the form <0xNN>")


def check_vocab_rows(meta: dict, n_rows: int, where: str = "") -> None:
    """The vocab (if the file has one) has one token per embedding row."""
    tokens = meta.get("tokenizer.ggml.tokens")
    if isinstance(tokens, list) and len(tokens) != n_rows:
        raise GGUFError(f"{where}tokenizer.ggml.tokens has {len(tokens)} entries but tensor "
                        f"'token_embd.weight' has {n_rows} rows")


@lru_cache(maxsize=1)
def byte_decoder() -> dict[str, bytes]:
    """GPT-2's byte alphabet, reversed: printable char -> the byte it stands for.

    Bytes that are printable Latin-1 ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for
    themselves; the other 68 bytes, in increasing order, take code points
    256, 257, ... so every byte has a visible, non-space character.
    """
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {chr(b): bytes([b]) for b in keep}
    others = sorted(set(range(256)) - set(keep))
    table.update((chr(256 + k), bytes([b])) for k, b in enumerate(others))
    return table
