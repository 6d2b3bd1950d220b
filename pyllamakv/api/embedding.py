"""Embeddings: ``Llama(embedding=True)``, ``embed`` and ``create_embedding``.

An embedding context outputs, for every token, the final-normed hidden state
(n_embd floats) where a generating one outputs logits. A text's tokens run in
one decode from an empty cache and are pooled as llama.cpp pools them
(``pooling_type``, llama.cpp's numbers or names): ``none`` (0) keeps one vector
per token, ``mean`` (1) averages them, ``cls`` (2) takes the first token's,
``last`` (3) the last token's. Unspecified (-1) takes the GGUF's
``{arch}.pooling_type``, and ``none`` when the file has none, as llama.cpp
does. ``normalize`` divides each vector by its L2 norm.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from ..engine.sequence import Sequence
    from ..text.tokenizer import Tokenizer

POOLING = {"none": 0, "mean": 1, "cls": 2, "last": 3}


def pooling_type(value, metadata: dict) -> int:
    """The pooling a context uses: value (-1/None: the file's), as a number."""
    if value is None or value == -1:
        arch = metadata.get("general.architecture", "")
        value = metadata.get(f"{arch}.pooling_type", 0)
    if isinstance(value, str):
        if value not in POOLING:
            raise ValueError(f"pooling_type {value!r} is not one of {sorted(POOLING)}")
        return POOLING[value]
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
            or int(value) not in POOLING.values():
        raise ValueError(f"pooling_type must be -1 (the model's) or one of {POOLING} "
                         f"(rank pooling is not supported), got {value!r}")
    return int(value)


def _pool(rows: np.ndarray, kind: int, normalize: bool):
    if kind == POOLING["mean"]:
        out = rows.mean(axis=0, dtype=np.float64)
    elif kind == POOLING["cls"]:
        out = rows[0].astype(np.float64)
    elif kind == POOLING["last"]:
        out = rows[-1].astype(np.float64)
    else:
        out = rows.astype(np.float64)
    if normalize:
        norm = np.linalg.norm(out, axis=-1, keepdims=True)
        out = out / np.where(norm > 0, norm, 1.0)
    return out.tolist()


def embed(seq: "Sequence", tokenizer: "Tokenizer", pooling: int, input,
          normalize: bool = False, truncate: bool = True, return_count: bool = False):
    """One embedding (a list of floats; per token a list of them with pooling
    none) for a str, or a list of them for a list of str, computed on seq (a
    sequence of an embedding context) from an empty cache, which it leaves empty."""
    if not getattr(seq.ctx, "embeddings", False):
        raise RuntimeError("Llama must be created with embedding=True to compute embeddings")
    texts = [input] if isinstance(input, str) else input
    if not isinstance(texts, (list, tuple)) or not all(isinstance(t, str) for t in texts):
        raise TypeError("input must be a str or a list of str")
    n_batch = seq.n_batch
    out, total = [], 0
    for text in texts:
        tokens = tokenizer.encode(text.encode("utf-8"), add_bos=True, special=False)
        if truncate:
            tokens = tokens[:n_batch]
        if not tokens:
            raise ValueError("cannot embed an empty text (no tokens)")
        if len(tokens) > n_batch:
            raise ValueError(f"Requested tokens ({len(tokens)}) exceed batch size of {n_batch}")
        total += len(tokens)
        seq.reset()
        try:
            rows = seq.eval_rows(tokens)    # (n_tokens, n_embd)
        finally:
            seq.reset()
        out.append(_pool(rows, pooling, normalize))
    result = out[0] if isinstance(input, str) else out
    return (result, total) if return_count else result


def create_embedding(seq: "Sequence", tokenizer: "Tokenizer", pooling: int, input,
                     model: str) -> dict:
    """OpenAI's embedding list for input (a str or a list of str), named model."""
    data, total = embed(seq, tokenizer, pooling, input, return_count=True)
    data = [data] if isinstance(input, str) else data
    return {"object": "list", "model": model,
            "data": [{"object": "embedding", "embedding": e, "index": i}
                     for i, e in enumerate(data)],
            "usage": {"prompt_tokens": total, "total_tokens": total}}
