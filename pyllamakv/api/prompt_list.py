"""create_completion over a list of prompts, as OpenAI's completions take it:
one choice per prompt, choice i (``index`` i) for prompt i, and one usage
summing them all.

With ``Llama(n_seq_max=N)``, N > 1, up to N prompts run at once, each as a
sequence of the Llama's engine (completion.py on that Sequence, its sampled
tokens' decodes queued for a shared step: api/decoding.py): their decode steps
and prefills go through the engine's scheduler together (engine/scheduler.py). Prompt i takes sequence i of its
group, sequence 0 being the Llama's own, so afterwards the Llama holds the
first prompt of the last group and its completion, and each other sequence
its own (kept for the next list's prefixes). With n_seq_max = 1, logits_all
(logprobs), stopping_criteria (which would see a lane's next token decoded
early by another lane's step), or on a server slot, the prompts run one
after another, each as a single-prompt call would. Batched groups use
neither the prompt cache nor speculation, and leave llm.timings as it was. Either way prompt i's sampler is made i-th, so
seeds drawn from the Llama's generator are those of one call per prompt,
and greedy texts are the same as one call per prompt.
"""
from __future__ import annotations

import itertools
from functools import partial
from typing import Any, Callable, Iterator

from .completion import completion_pieces
from .decoding import Decoding, token_stream
from ..config import CompletionConfig
from .response import Piece, Usage, completion_chunks, completion_response


def is_prompt_list(prompt: Any) -> bool:
    """A list of prompts (strings, bytes or token lists), not one token list."""
    return (isinstance(prompt, (list, tuple)) and len(prompt) > 0
            and all(isinstance(p, (str, bytes, list, tuple)) for p in prompt))


def complete_prompts(llm, prompts: list, c: CompletionConfig, make_sampler: Callable,
                     name: str, stopping_criteria=None):
    """The completion dict (or with c.stream the chunks) of every prompt."""
    tokens = [llm.prompt_tokens(p) for p in prompts]
    samplers = [make_sampler() for _ in tokens]
    usages = [Usage() for _ in tokens]
    lp = c.logprobs is not None

    def pieces(seq, i: int) -> Iterator[Piece]:
        """Prompt i's pieces: on the Llama's own sequence (seq None) as one call
        would, else on seq of its engine, no prompt cache or drafter."""
        if seq is None:
            return llm.completion_pieces(tokens[i], usages[i], c.max_tokens, c.stop, c.echo,
                                         c.logprobs, samplers[i],
                                         stopping_criteria=stopping_criteria)
        d = Decoding(logits_all=llm.config.logits_all, progress=llm.progress_callback,
                     defer=True)
        return completion_pieces(seq, llm.tokenizer, partial(token_stream, seq, d=d), tokens[i],
                                 usages[i], c.max_tokens, c.stop, c.echo, c.logprobs,
                                 samplers[i], stopping_criteria=stopping_criteria,
                                 logits_all=d.logits_all)

    groups = _groups(llm, len(tokens), stopping_criteria is None)
    if c.stream:
        def start() -> Iterator[dict]:
            chunks = _chunks(llm, groups, tokens, pieces, name, usages, lp)
            return itertools.chain([next(chunks)], chunks)
        return llm.guard.stream(start)

    def full() -> dict:
        out: list[list[Piece]] = [[] for _ in tokens]
        for group in groups:
            for i, piece in _run_group(llm, group, tokens, pieces):
                out[i].append(piece)
        return _merge([completion_response(iter(out[i]), name, usages[i], lp)
                       for i in range(len(tokens))], usages)
    return llm.guard.call(full)


def _groups(llm, n: int, batchable: bool) -> list[range]:
    cfg = llm.config
    width = cfg.n_seq_max if (batchable and cfg.n_seq_max > 1 and not cfg.logits_all and n > 1
                              and not llm.engine.shared) else 1
    return [range(a, min(n, a + width)) for a in range(0, n, width)]


def _run_group(llm, group: range, tokens: list, make) -> Iterator[tuple[int, Any]]:
    """(prompt index, item) of the group's prompts, interleaved, where make(seq,
    i) gives prompt i's pieces or chunks on seq (None: the Llama's own); one
    item of each prompt in turn."""
    if len(group) == 1:                  # the Llama's own path: prompt cache, speculation
        i = group[0]
        llm.load_cached_prefix(tokens[i])
        for item in make(None, i):
            yield i, item
        return
    seqs = [llm.engine.sequence(s) for s in range(len(group))]
    gens = {i: make(seq, i) for seq, i in zip(seqs, group)}
    try:
        while gens:
            for i in list(gens):
                try:
                    item = next(gens[i])
                except StopIteration:
                    del gens[i]
                    continue
                yield i, item
    finally:
        for g in gens.values():
            g.close()
        for seq in seqs:                 # a token sampled but not yet decoded is dropped
            seq.drop_pending()


def _chunks(llm, groups, tokens, pieces, name, usages, lp) -> Iterator[dict]:
    """The groups' stream chunks, interleaved, each with its prompt's index."""
    def chunks(seq, i: int) -> Iterator[dict]:
        return completion_chunks(pieces(seq, i), name, usages[i], lp)
    cid = None
    for group in groups:
        for i, chunk in _run_group(llm, group, tokens, chunks):
            cid = cid or chunk["id"]
            chunk["id"] = cid
            chunk["choices"][0]["index"] = i
            yield chunk


def _merge(responses: list[dict], usages: list[Usage]) -> dict:
    out = dict(responses[0])
    out["choices"] = [dict(r["choices"][0], index=i) for i, r in enumerate(responses)]
    total = Usage(sum(u.prompt_tokens for u in usages), sum(u.completion_tokens for u in usages))
    out["usage"] = total.as_dict()
    return out
