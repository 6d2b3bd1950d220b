"""A request's Sampler from its sampling fields, and llama-cpp-python's seed chain.

``make_sampler`` is what ``Llama.sampler`` and a server slot build a
generation's sampler with: the sampling parameters, a grammar
(grammar.LlamaGrammar, held by a GrammarConstraint over the tokenizer) and
llama-cpp-python's logits processors. ``next_seed`` is the chain a caller
without a seed samples along: each call draws the next seed from the last.
"""
from __future__ import annotations

import random

from ..engine.sampling import Sampler, SamplingParams
from ..errors import ParameterTypeError
from .grammar import GrammarConstraint, LlamaGrammar


def next_seed(seed: int) -> int:
    """The seed after seed in llama-cpp-python's chain."""
    return random.Random(seed).randint(0, 2**32 - 1)


def make_sampler(tokenizer, n_vocab: int, seed: int, *, temperature: float = 0.8,
                 top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
                 typical_p: float = 1.0, repeat_penalty: float = 1.0,
                 presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                 logit_bias: dict | None = None, grammar: LlamaGrammar | None = None,
                 mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                 logits_processor=None) -> Sampler:
    """A Sampler over n_vocab ids with seed; with a grammar it samples only the
    tokens the grammar allows (tokenizer: the one that spells them)."""
    p = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                       typical_p=typical_p, repeat_penalty=repeat_penalty,
                       presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
                       logit_bias={} if logit_bias is None else logit_bias, seed=seed,
                       mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau,
                       mirostat_eta=mirostat_eta)
    constraint = None
    if grammar is not None:
        if not isinstance(grammar, LlamaGrammar):
            raise ParameterTypeError(f"grammar must be a LlamaGrammar, not "
                                     f"{type(grammar).__name__}")
        constraint = GrammarConstraint(grammar, tokenizer, n_vocab)
    procs = [] if logits_processor is None else (
        list(logits_processor) if isinstance(logits_processor, (list, tuple))
        else [logits_processor])
    sampler = Sampler(p, n_vocab, constraint, procs)
    sampler.generated_only = True     # penalties over generated tokens (llama-cpp-python)
    return sampler
