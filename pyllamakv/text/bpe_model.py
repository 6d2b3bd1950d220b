"""The tokenizers library's BPE model for a GGUF vocab (see tokenizer.py).

- ``gpt2`` vocabs: the ranked merges, with GPT-2's byte-level alphabet.
- ``llama`` (SPM) vocabs: every split of an entry into two entries is a
  merge, ranked by the entry's score, with byte fallback.

Built in time linear in the vocab: in bulk where the file is well formed,
one check per merge line where it is not.
"""
from __future__ import annotations

from tokenizers import Tokenizer as _HFTokenizer
from tokenizers import models as _hf_models
from tokenizers import pre_tokenizers as _hf_pre

from .pretokenizer import PreTokenizer
from ..gguf.vocab import Vocab


def build_bpe(vocab: Vocab, pre: PreTokenizer | None) -> _HFTokenizer:
    """The model for vocab; pre: the gpt2 pre-tokenizer (None for SPM)."""
    ids = vocab.text_to_id
    if pre is not None:
        tk = _HFTokenizer(_gpt2_bpe(ids, vocab.merges, pre.ignore_merges))
        tk.pre_tokenizer = _hf_pre.ByteLevel(add_prefix_space=False, use_regex=False)
        return tk
    # SPM: every split of an entry into two entries is a merge, best score first;
    # only cuts where both sides have the length of some entry are tried (a
    # 300k-character entry would otherwise cost 300k slices of itself)
    scores = vocab.scores
    have = {len(t) for t in ids}
    lengths = sorted(have)
    ranked = []
    for text, tid in ids.items():
        n = len(text)
        for i in lengths:
            if i >= n:
                break
            if n - i not in have:
                continue
            a, b = text[:i], text[i:]
            if a in ids and b in ids:
                ranked.append((-scores[tid], tid, i, a, b))
    ranked.sort()
    unk = vocab.tokens[vocab.unk_id] if vocab.unk_id is not None else None
    model = _hf_models.BPE(ids, [(a, b) for *_, a, b in ranked], unk_token=unk,
                           byte_fallback=True)
    return _HFTokenizer(model)


def _gpt2_bpe(ids: dict[str, int], lines: list[str], ignore_merges: bool) -> _hf_models.BPE:
    """BPE over the merges "left right" whose sides and result are all vocab
    entries (the others cannot apply: llama.cpp skips them too), best first.

    Well-formed files go in as they are, split at their first space: the
    tokenizers library refuses a merge with a text outside the vocab, and
    only then is each line checked here (a line that starts with a space
    splits after it, so that path is taken whenever one does: "" is no token).
    """
    if "" not in ids:
        try:
            return _hf_models.BPE(ids, [tuple(line.split(" ", 1)) for line in lines],
                                  ignore_merges=ignore_merges)
        except Exception:       # a merge outside the vocab, or a line without a space
            pass
    merges = []
    for line in lines:
        pos = line.find(" ", 1)
        if pos < 0:
            continue
        a, b = line[:pos], line[pos + 1:]
        if a in ids and b in ids and a + b in ids:
            merges.append((a, b))
    return _hf_models.BPE(ids, merges, ignore_merges=ignore_merges)
