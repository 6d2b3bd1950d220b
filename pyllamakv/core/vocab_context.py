"""The context of a ``vocab_only`` Llama: the vocabulary, no weights, no cache.

llama-cpp-python's ``Llama(vocab_only=True)`` still owns a context object
(``llm._ctx``, whose ``ctx`` handle is set until close); code written for it
checks that. Here the same place holds this stand-in: ``ctx`` is the tokenizer
(all such a Llama can use), the cache is empty, and anything that needs the
weights raises the error a vocab_only Llama gives.
"""
from __future__ import annotations

VOCAB_ONLY = ("this Llama was created with vocab_only=True: it tokenizes and formats "
              "chats, and has no weights to evaluate")


class VocabOnlyContext:
    """ctx: the tokenizer until close(), then None; n_tokens 0; decoding refused."""

    recurrent_bytes = 0
    n_tokens = 0
    mtp = False

    def __init__(self, tokenizer, n_ctx: int) -> None:
        self.ctx = tokenizer
        self.n_ctx = int(n_ctx)

    def decode(self, *args, **kwargs):
        raise RuntimeError(VOCAB_ONLY)

    logits = kv_stats = state_get = state_set = decode

    def close(self) -> None:
        self.ctx = None
