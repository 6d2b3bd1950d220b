"""A chat request as a prompt on a Sequence, and the shapes of its answer.

Any door that generates on a Sequence (``Llama``'s own, a server slot's)
builds a completion's prompt the same way (``prompt_ids``) and a chat
completion's: ``chat_prompt`` renders the messages
through the chat template (the tools and their forced call's opening where
asked, tools.py), tokenizes them with their segments' own special parsing,
and gives the stop strings and ids the template adds and the grammar that
constrains the reply (a forced tool call's, or response_format's:
grammar.py). ``chat_shapes`` / ``completion_shapes`` are the two builders
(streamed, whole) that turn a completion's pieces into OpenAI's dicts
(response.py; a reply parsed for tool calls: tool_stream.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..config import tokens_arg
from .grammar import LlamaGrammar, response_format_grammar
from .response import (Usage, chat_chunks, chat_response, completion_chunks,
                       completion_response, with_tool_calls)
from .tool_stream import tool_chat_chunks
from .tools import ToolPlan, normalize_messages, plan_tools


def prompt_ids(tokenizer, n_ctx: int, n_vocab: int, prompt) -> list[int]:
    """A completion's prompt as ids: text (str or bytes) tokenized with BOS and
    special tokens, to at most n_ctx ids; ids checked against n_vocab."""
    if isinstance(prompt, (str, bytes)):
        return tokenizer.encode(prompt.encode() if isinstance(prompt, str) else prompt,
                                add_bos=True, special=True, max_tokens=n_ctx)
    return tokens_arg("prompt", prompt, n_vocab)


@dataclass(slots=True)
class ChatTurn:
    """What a chat request generates from: its prompt's ids, the stops (the
    template's, then the request's), the template's stop ids, the tool plan
    (None: no tools) and the grammar the reply keeps to (None: free text)."""
    tokens: list[int]
    stops: list[str]
    stop_ids: tuple
    plan: ToolPlan | None
    grammar: LlamaGrammar | None


def chat_prompt(template, tokenizer, n_ctx: int, messages: list[dict], stop: list[str],
                response_format: dict | None = None, grammar: LlamaGrammar | None = None,
                tools: list | None = None, tool_choice=None, functions: list | None = None,
                function_call=None) -> ChatTurn:
    """The ChatTurn of messages through template (a ChatFormatter or an adapter with
    .template and .format), tokenized by tokenizer to at most n_ctx ids."""
    plan = plan_tools(template.template, tools, tool_choice, functions, function_call)
    if plan is not None and plan.grammar is not None:
        grammar = plan.grammar
    elif response_format is not None:
        if grammar is not None:
            raise ValueError("give response_format or grammar, not both")
        grammar = response_format_grammar(response_format)
    chat = template.format(normalize_messages(messages, plan), add_generation_prompt=True,
                           **(plan.template_vars if plan else {}))
    segments = (chat.segments or [(chat.prompt, True)]) + \
        ([(plan.prompt_suffix, True)] if plan and plan.prompt_suffix else [])
    tokens = tokenizer.encode_segments(segments, add_bos=not chat.added_special,
                                       max_tokens=n_ctx)
    return ChatTurn(tokens, list(chat.stop) + list(stop), tuple(chat.stop_token_ids), plan,
                    grammar)


Shapes = tuple[Callable, Callable]   # (pieces -> chunks, pieces -> the whole dict)


def chat_shapes(plan: ToolPlan | None, name: str, usage: Usage, logprobs: bool) -> Shapes:
    """The chat.completion builders; with tools, the reply parsed for tool calls."""
    if plan is not None:
        return (lambda p: tool_chat_chunks(p, plan, name),
                lambda p: with_tool_calls(chat_response(p, name, usage, logprobs), plan))
    return (lambda p: chat_chunks(p, name, usage, logprobs),
            lambda p: chat_response(p, name, usage, logprobs))


def completion_shapes(name: str, usage: Usage, logprobs: bool) -> Shapes:
    """The text_completion builders."""
    return (lambda p: completion_chunks(p, name, usage, logprobs),
            lambda p: completion_response(p, name, usage, logprobs))
