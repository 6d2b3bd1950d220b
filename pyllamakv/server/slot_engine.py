"""What a slot runs its requests on: a Sequence and the model's shared parts.

A ``SlotEngine`` is one slot's sequence of the server's engine (the one
shared engine whose scheduler batches the slots' steps; or, where the model
needs it, a context of the slot's own: engines.sharing) with what every slot
shares: the tokenizer, the chat template, the model's names. Its requests are
the library's functions of a Sequence: completions and chats through
completion.py's pieces of decoding.py's token stream (chat_request.py renders
a chat's prompt and shapes its answer), embeddings through embedding.py. The
job running on the slot (``job``, set by slots.py) is counted and stopped
through accounting.py. Speculation is the request's (``draft_model``, set
around a request by speculation.drafting from the slot's drafters
``spec_draft_model`` / ``spec_mtp`` and the server's ``spec_default``).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from functools import partial
from typing import Any, Sequence as Seq

from ..api.chat_request import chat_prompt, chat_shapes, completion_shapes, prompt_ids
from ..api.completion import completion_pieces, shape_pieces
from ..api.decoding import Decoding, token_stream
from ..api.embedding import create_embedding, embed
from ..api.response import Usage
from ..api.samplers import make_sampler, next_seed
from ..config import CompletionConfig
from ..engine.sequence import Sequence
from .accounting import counted


@dataclass(slots=True)
class Shared:
    """The parts of the loaded model every slot uses (engines.py fills it)."""
    model_path: str
    metadata: dict            # llama-cpp-python's string metadata (/infill's FIM ids)
    tokenizer: Any
    template: Any             # the chat template (text/chat.py's ChatFormatter)
    n_ctx: int
    n_vocab: int
    device: str
    memory: Any               # budget.BudgetSplit under --gpu-memory-mib, else None
    pooling: int              # an embedding server's pooling (embedding.py's number)
    apart: str | None         # why each slot has a context of its own (None: one shared)


class SlotEngine:
    """One slot: requests on `sequence` of `engine` (engine/engine.py, opened by
    engine/open.py) with the `shared` parts (see the module)."""

    def __init__(self, sequence: Sequence, shared: Shared, engine):
        self.sequence, self.shared, self.engine = sequence, shared, engine
        self.kv_pool_bytes = engine.plan.kv_pool_bytes   # its context's pool (None: all resident)
        self.job = None                           # the job running now (slots.py)
        self.draft_model = None                   # this request's drafter (speculation.py)
        self.spec_default = self.spec_draft_model = self.spec_mtp = None
        self.spec_lookups: dict = {}
        self._seed = random.SystemRandom().randint(0, 2**32 - 1)

    # ------------------------------------------------------------ the model's names

    model_path = property(lambda self: self.shared.model_path)
    metadata = property(lambda self: self.shared.metadata)
    tokenizer = property(lambda self: self.shared.tokenizer)
    device = property(lambda self: self.shared.device)
    memory = property(lambda self: self.shared.memory)
    apart = property(lambda self: self.shared.apart)

    @property
    def model(self):
        """The loaded model (core/native.py's Model) the slots share."""
        return self.sequence.ctx.model

    def n_ctx(self) -> int:
        return self.shared.n_ctx

    def n_vocab(self) -> int:
        return self.shared.n_vocab

    @property
    def chat_template(self) -> str:
        return self.shared.template.template

    def apply_template(self, messages: list[dict]) -> str:
        """The prompt messages render to (llama-server's /apply-template)."""
        return self.shared.template.format(messages, add_generation_prompt=True).prompt

    # ------------------------------------------------------------ generation

    def sampler(self, seed: int | None = None, **params):
        """A request's sampler; without a seed, the next of the slot's seed chain."""
        if seed is None or seed == -1:
            seed = self._seed = next_seed(self._seed)
        return make_sampler(self.shared.tokenizer, self.shared.n_vocab, seed, **params)

    def _stream(self, prompt: list[int], sampler, limit: int | None = None, ends=None, *,
                d: Decoding):
        """The sampled ids after prompt on the slot's sequence, counted into the job."""
        inner = token_stream(self.sequence, prompt, sampler, d, True, None, limit, ends)
        return counted(inner, self.job, self.sequence, prompt, self.shared.tokenizer.eog_ids,
                       d.timings)

    def _pieces(self, tokens: list[int], usage: Usage, c: CompletionConfig, stops,
                logprobs: int | None, sampler, stop_ids: Seq[int] = ()):
        d = Decoding(self.draft_model)
        # the sampled tokens' logprobs come from the last logits (no logits_all), with
        # their ids (llama-server's n_probs: native.py; shapes.py drops them)
        return completion_pieces(
            self.sequence, self.shared.tokenizer, partial(self._stream, d=d), tokens, usage,
            c.max_tokens, stops, c.echo, logprobs, sampler, stop_ids,
            drafting=d.drafter is not None, sampled_logprobs=True, logprob_ids=True)

    def create_completion(self, prompt, max_tokens: int | None = 16, stop=None,
                          echo: bool = False, logprobs: int | None = None,
                          stream: bool = False, model: str | None = None, **sampling):
        """OpenAI's text completion of one prompt (a str or token ids)."""
        c = CompletionConfig(max_tokens, stop, echo, logprobs, stream)
        tokens = prompt_ids(self.shared.tokenizer, self.shared.n_ctx, self.shared.n_vocab,
                            prompt)
        sampler, usage = self.sampler(**sampling), Usage()
        return shape_pieces(
            lambda: self._pieces(tokens, usage, c, c.stop, c.logprobs, sampler), c.stream,
            *completion_shapes(model or self.model_path, usage, c.logprobs is not None))

    def create_chat_completion(self, messages: list[dict], max_tokens: int | None = None,
                               stop=None, stream: bool = False, model: str | None = None,
                               logprobs: bool = False, top_logprobs: int | None = None,
                               response_format: dict | None = None, grammar=None,
                               tools: list | None = None, tool_choice=None,
                               functions: list | None = None, function_call=None,
                               **sampling):
        """OpenAI's chat completion of messages through the chat template."""
        c = CompletionConfig(max_tokens, stop, False, top_logprobs, stream)
        turn = chat_prompt(self.shared.template, self.shared.tokenizer, self.shared.n_ctx,
                           messages, c.stop, response_format, grammar, tools, tool_choice,
                           functions, function_call)
        sampler, usage = self.sampler(grammar=turn.grammar, **sampling), Usage()
        n_lp = (c.logprobs or 0) if logprobs else None
        return shape_pieces(
            lambda: self._pieces(turn.tokens, usage, c, turn.stops, n_lp, sampler,
                                 turn.stop_ids), c.stream,
            *chat_shapes(turn.plan, model or self.model_path, usage, bool(logprobs)))

    # ------------------------------------------------------------ embeddings

    def embed(self, input, normalize: bool = False):
        """Embeddings of input on the slot's sequence (an embedding server's)."""
        return embed(self.sequence, self.shared.tokenizer, self.shared.pooling, input,
                     normalize)

    def create_embedding(self, input, model: str | None = None) -> dict:
        """OpenAI's embedding list for input."""
        return create_embedding(self.sequence, self.shared.tokenizer, self.shared.pooling,
                                input, model or self.model_path)

    # ------------------------------------------------------------ figures and lifetime

    def kv_stats(self) -> dict:
        """The slot's KV figures: its sequence's in a shared engine, else its context's."""
        if self.engine.shared:
            return self.sequence.kv_stats()
        return self.sequence.ctx.kv_stats()

    def mtp_stats(self) -> dict:
        """Its sequence's MTP block figures, where its context runs one; else {}."""
        ctx = self.sequence.ctx
        return ctx.mtp_stats(seq=self.sequence.id) if getattr(ctx, "mtp", False) else {}

    def close(self) -> None:
        """Free the context the slot's sequence is of and the model the slots share,
        with every context still open on it (idempotent)."""
        model = self.model
        self.engine.close()
        model.close()
