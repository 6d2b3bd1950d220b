"""The OpenAI-style requests of a Llama: completions, chat completions, embeddings.

A mixin of ``Llama`` (llama.py), which owns the model, the context, the
history and the sampler; these methods turn requests into token streams
(completion.py) and shape them into llama-cpp-python's dicts (response.py).
Chat goes through the model's template (chat.py), with grammars
(grammar.py) and tool calls (tools.py) where asked.
"""
from __future__ import annotations

from typing import Sequence

from .completion import completion_pieces, run_pieces
from .compat import check_extra_kwargs
from ..config import CompletionConfig
from .embedding import create_embedding, embed
from .grammar import LlamaGrammar
from ..engine.guard import guarded
from .prompt_list import complete_prompts, is_prompt_list
from .chat_request import chat_prompt, chat_shapes, completion_shapes, prompt_ids
from .response import Usage
from ..text.chat_handlers import FormatterAdapter


# Llama.sampler's parameters, spelled as the requests spell them
SAMPLING_ARGS = ("temperature", "top_k", "top_p", "min_p", "typical_p", "repeat_penalty",
                 "presence_penalty", "frequency_penalty", "logit_bias", "seed", "grammar",
                 "mirostat_mode", "mirostat_tau", "mirostat_eta", "logits_processor")


def sampling_args(args: dict) -> dict:
    """The sampler's keyword arguments among a request's (its locals())."""
    return {k: args[k] for k in SAMPLING_ARGS}


class OpenAIMethods:
    def prompt_tokens(self, prompt: str | bytes | Sequence[int]) -> list[int]:
        return prompt_ids(self.tokenizer, self._n_ctx, self._n_vocab, prompt)

    def create_completion(self, prompt: str | bytes | Sequence[int] | list, suffix: None = None,
                          max_tokens: int | None = 16, temperature: float = 0.8,
                          top_p: float = 0.95, min_p: float = 0.05, typical_p: float = 1.0,
                          logprobs: int | None = None, echo: bool = False,
                          stop: str | list[str] | None = None, frequency_penalty: float = 0.0,
                          presence_penalty: float = 0.0, repeat_penalty: float = 1.0,
                          top_k: int = 40, stream: bool = False, seed: int | None = None,
                          logit_bias: dict | None = None, model: str | None = None,
                          grammar: LlamaGrammar | None = None, mirostat_mode: int = 0,
                          mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                          logits_processor=None, stopping_criteria=None, **llama_cpp_kwargs):
        """A text completion dict, or with stream=True an iterator of chunks. A list
        of prompts gives one choice per prompt (prompt_list.py)."""
        check_extra_kwargs("create_completion", llama_cpp_kwargs)
        c = CompletionConfig(max_tokens, stop, echo, logprobs, stream, suffix)
        if is_prompt_list(prompt):   # one choice per prompt (prompt_list.py)
            args = sampling_args(locals())
            return complete_prompts(self, prompt, c, lambda: self.sampler(**args),
                                    model or self.model_path, stopping_criteria)
        tokens = self.prompt_tokens(prompt)
        sampler = self.sampler(**sampling_args(locals()))
        usage, name, lp = Usage(), model or self.model_path, c.logprobs is not None
        self.load_cached_prefix(tokens)
        return run_pieces(
            self.guard, lambda: self.completion_pieces(tokens, usage, c.max_tokens, c.stop,
                                                       c.echo, c.logprobs, sampler,
                                                       stopping_criteria=stopping_criteria),
            c.stream, *completion_shapes(name, usage, lp))

    __call__ = create_completion

    def create_chat_completion(self, messages: list[dict], temperature: float = 0.2,
                               top_p: float = 0.95, top_k: int = 40, min_p: float = 0.05,
                               typical_p: float = 1.0, stream: bool = False,
                               stop: str | list[str] | None = None, seed: int | None = None,
                               max_tokens: int | None = None, presence_penalty: float = 0.0,
                               frequency_penalty: float = 0.0, repeat_penalty: float = 1.0,
                               logit_bias: dict | None = None, logprobs: bool = False,
                               top_logprobs: int | None = None, model: str | None = None,
                               response_format: dict | None = None,
                               grammar: LlamaGrammar | None = None, tools: list | None = None,
                               tool_choice: str | dict | None = None,
                               functions: list | None = None,
                               function_call: str | dict | None = None,
                               mirostat_mode: int = 0, mirostat_tau: float = 5.0,
                               mirostat_eta: float = 0.1, logits_processor=None,
                               stopping_criteria=None, chat_formatter=None,
                               **llama_cpp_kwargs):
        """A chat.completion dict, or with stream=True an iterator of chunks.
        response_format / grammar constrain the reply (grammar.py); tools,
        tool_choice and the legacy functions / function_call give tool calls
        (tools.py). A Llama made with chat_handler= hands the request to it;
        chat_formatter (a llama_chat_format formatter) replaces the model's template."""
        self._open()
        if self.chat_handler is not None and chat_formatter is None:
            args = {k: v for k, v in locals().items()
                    if k not in ("self", "messages", "chat_formatter", "llama_cpp_kwargs")}
            return self.chat_handler(llama=self, messages=messages, **args, **llama_cpp_kwargs)
        check_extra_kwargs("create_chat_completion", llama_cpp_kwargs)
        template = self._chat if chat_formatter is None else FormatterAdapter(
            chat_formatter, self.tokenizer, "the chat_formatter")
        c = CompletionConfig(max_tokens, stop, False, top_logprobs, stream)
        logprobs = bool(logprobs)
        turn = chat_prompt(template, self.tokenizer, self._n_ctx, messages, c.stop,
                           response_format, grammar, tools, tool_choice, functions,
                           function_call)
        grammar = turn.grammar
        sampler = self.sampler(**sampling_args(locals()))
        n_lp = (c.logprobs or 0) if logprobs else None
        usage, name = Usage(), model or self.model_path
        self.load_cached_prefix(turn.tokens)
        return run_pieces(
            self.guard, lambda: self.completion_pieces(
                turn.tokens, usage, c.max_tokens, turn.stops, False, n_lp, sampler,
                turn.stop_ids, stopping_criteria=stopping_criteria),
            c.stream, *chat_shapes(turn.plan, name, usage, logprobs))

    def completion_pieces(self, tokens: list[int], usage: Usage, max_tokens: int | None, stop,
                          echo: bool, logprobs: int | None, sampler, stop_ids=(),
                          stopping_criteria=None):
        """The pieces of a completion of tokens on this Llama's sequence (completion.py),
        with its token stream, settings and prompt cache."""
        self._logits_mode()

        def keep() -> None:      # the whole completion was read: keep where it ended
            if self.cache is not None:
                self.cache[self.input_ids.tolist()] = self.save_state()
        return completion_pieces(
            self.sequence, self.tokenizer, self.token_stream, tokens, usage, max_tokens, stop,
            echo, logprobs, sampler, stop_ids, stopping_criteria,
            logits_all=self.config.logits_all, drafting=self.draft_model is not None,
            on_end=keep)

    @guarded
    def embed(self, input: str | list[str], normalize: bool = False, truncate: bool = True,
              return_count: bool = False):
        """Embeddings of input (embedding.py); needs embedding=True."""
        self._embedding_mode()
        return embed(self.sequence, self.tokenizer, self.pooling_type(), input, normalize,
                     truncate, return_count)

    @guarded
    def create_embedding(self, input: str | list[str], model: str | None = None) -> dict:
        """OpenAI's embedding response for input; needs embedding=True."""
        self._embedding_mode()
        return create_embedding(self.sequence, self.tokenizer, self.pooling_type(), input,
                                model or self.model_path)

