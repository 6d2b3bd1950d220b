"""llama_cpp.llama_chat_format's objects: formatters, the handler registry, and
what a Llama uses for ``chat_format=`` / ``chat_handler=``.

A *formatter* is ``f(messages=..., **kw) -> FormatterResponse`` (named_formats.py
holds llama-cpp-python's named ones; ``Jinja2ChatFormatter`` renders a Jinja2
template in chat.py's bounded sandbox). A *handler* is
``h(llama=..., messages=..., **create_chat_completion's arguments) -> response``;
``chat_formatter_to_chat_completion_handler`` makes one from a formatter, running
the Llama's own chat completion over that formatter's prompt.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from .chat import ChatFormatter, ChatPrompt, validate_messages
from .chat_formats import CHAT_FORMATS
from .named_formats import NAMED_FORMATS, FormatterResponse

ChatFormatterResponse = FormatterResponse
Handler = Callable[..., Any]


class LlamaChatCompletionHandlerNotFoundException(Exception):
    pass


class Jinja2ChatFormatter:
    """A Jinja2 chat template as a formatter (rendered in chat.py's sandbox)."""

    def __init__(self, template: str, eos_token: str, bos_token: str,
                 add_generation_prompt: bool = True, stop_token_ids: Sequence[int] | None = None):
        self.template, self.eos_token, self.bos_token = template, eos_token, bos_token
        self.add_generation_prompt = add_generation_prompt
        self.stop_token_ids = None if stop_token_ids is None else set(stop_token_ids)
        self._fmt = ChatFormatter(template, bos_token=bos_token, eos_token=eos_token,
                                  source="Jinja2ChatFormatter's template")

    def __call__(self, *, messages, functions=None, function_call=None, tools=None,
                 tool_choice=None, **kwargs) -> FormatterResponse:
        chat = self._fmt.format(messages, self.add_generation_prompt, functions=functions,
                                function_call=function_call, tools=tools,
                                tool_choice=tool_choice, **kwargs)
        criteria = None
        if self.stop_token_ids is not None:
            from ..engine.processors import StoppingCriteriaList
            ids = self.stop_token_ids
            criteria = StoppingCriteriaList([lambda tokens, logits: int(tokens[-1]) in ids])
        return FormatterResponse(chat.prompt, [self.eos_token], criteria, added_special=True)

    def to_chat_handler(self) -> Handler:
        return chat_formatter_to_chat_completion_handler(self)


class LlamaChatCompletionHandlerRegistry:
    """Handlers by name (one registry per process, as llama-cpp-python's singleton)."""
    _chat_handlers: dict[str, Handler] = {}

    def register_chat_completion_handler(self, name: str, chat_handler: Handler,
                                         overwrite: bool = False) -> None:
        if not overwrite and name in self._chat_handlers:
            raise ValueError(f"a chat handler named {name!r} is already registered "
                             "(overwrite=True replaces it)")
        self._chat_handlers[name] = chat_handler

    def unregister_chat_handler(self, name: str) -> None:
        if self._chat_handlers.pop(name, None) is None:
            raise ValueError(f"no chat handler is registered as {name!r}")

    def get_chat_completion_handler_by_name(self, name: str) -> Handler:
        try:
            return self._chat_handlers[name]
        except KeyError:
            raise LlamaChatCompletionHandlerNotFoundException(
                f"no chat handler named {name!r} (known: {sorted(self._chat_handlers)})") \
                from None


def get_chat_completion_handler(name: str) -> Handler:
    return LlamaChatCompletionHandlerRegistry().get_chat_completion_handler_by_name(name)


def register_chat_completion_handler(name: str):
    def decorator(f: Handler) -> Handler:
        LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(name, f)
        return f
    return decorator


def chat_formatter_to_chat_completion_handler(formatter) -> Handler:
    """A handler that runs Llama.create_chat_completion over formatter's prompt."""
    def handler(llama, messages, **kwargs):
        return llama.create_chat_completion(messages, chat_formatter=formatter, **kwargs)
    handler.formatter = formatter
    return handler


def register_chat_format(name: str):
    """Decorator: a formatter, usable as chat_format=name and get_chat_completion_handler(name)."""
    def decorator(f):
        LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(
            name, chat_formatter_to_chat_completion_handler(f), overwrite=True)
        return f
    return decorator


for _name, _f in NAMED_FORMATS.items():
    register_chat_format(_name)(_f)


def hf_tokenizer_config_to_chat_formatter(tokenizer_config: dict,
                                          add_generation_prompt: bool = True):
    """A formatter from a Hugging Face tokenizer_config.json's dict (its chat_template,
    bos_token and eos_token). The reply is opened by an empty assistant message, as
    llama-cpp-python does."""
    for key in ("chat_template", "bos_token", "eos_token"):
        if not isinstance(tokenizer_config.get(key), str):
            raise ValueError(f"tokenizer_config[{key!r}] must be a string")
    bos, eos = tokenizer_config["bos_token"], tokenizer_config["eos_token"]
    fmt = ChatFormatter(tokenizer_config["chat_template"], bos_token=bos, eos_token=eos,
                        source="tokenizer_config's chat_template")

    def format_tokenizer_config(messages, **kwargs) -> FormatterResponse:
        if add_generation_prompt:
            messages = [*messages, {"role": "assistant", "content": ""}]
        chat = fmt.format(messages, add_generation_prompt=False, **kwargs)
        return FormatterResponse(chat.prompt, [eos, bos], added_special=True)
    return format_tokenizer_config


def hf_tokenizer_config_to_chat_completion_handler(tokenizer_config: dict,
                                                   add_generation_prompt: bool = True) -> Handler:
    return chat_formatter_to_chat_completion_handler(
        hf_tokenizer_config_to_chat_formatter(tokenizer_config, add_generation_prompt))


def guess_chat_format_from_gguf_metadata(metadata: dict) -> str | None:
    """The named format whose template the GGUF's is, character for character."""
    template = metadata.get("tokenizer.chat_template")
    if not template:
        return None
    for name, (t, _) in CHAT_FORMATS.items():
        if t == template:
            return name
    return None


# ---------------------------------------------------------------- the Llama's side

class FormatterAdapter:
    """A llama_cpp-style formatter behind ChatFormatter's ``format`` (what Llama uses)."""
    template = ""        # renders no tools: tools.py describes them in a system message

    def __init__(self, formatter, tokenizer, source: str) -> None:
        self.formatter, self.source = formatter, source
        self.eos = tokenizer.token_text(tokenizer.eos_id) if tokenizer.eos_id is not None else ""
        self.stop_token_ids = sorted(tokenizer.eog_ids)

    def format(self, messages, add_generation_prompt: bool = True, **extra) -> ChatPrompt:
        r = self.formatter(messages=validate_messages(messages), **extra)
        stop = [r.stop] if isinstance(r.stop, str) else list(r.stop or [])
        stop = list(dict.fromkeys(s for s in stop + [self.eos] if s))
        return ChatPrompt(r.prompt, stop, list(self.stop_token_ids), bool(r.added_special))


# names that pick the model's own template plus pyllamakv's tool calling
TOOL_FORMATS = ("functionary", "functionary-v1", "functionary-v2", "chatml-function-calling")


def known_chat_formats() -> list[str]:
    return sorted(set(CHAT_FORMATS) | set(LlamaChatCompletionHandlerRegistry._chat_handlers)
                  | set(TOOL_FORMATS))


def llama_chat_formatter(name: str | None, metadata: dict, tokenizer):
    """(formatter for Llama, the chat_format it reports) for chat_format=name
    (None: the model's template; a gemma3 file without one: gemma's turns)."""
    if (name is None and metadata.get("general.architecture") == "gemma3"
            and "tokenizer.chat_template" not in metadata):
        name = "gemma"
    if name is None or name in TOOL_FORMATS[:3]:
        guessed = guess_chat_format_from_gguf_metadata(metadata)
        has = bool(metadata.get("tokenizer.chat_template"))
        fmt = ChatFormatter.from_metadata(metadata, tokenizer)
        return fmt, name or guessed or ("chat_template.default" if has else "chatml")
    if name == "chatml-function-calling":
        name_, template = name, CHAT_FORMATS["chatml"]
    elif name in CHAT_FORMATS:
        name_, template = name, CHAT_FORMATS[name]
    else:
        handler = LlamaChatCompletionHandlerRegistry._chat_handlers.get(name) \
            if isinstance(name, str) else None
        formatter = getattr(handler, "formatter", None)
        if formatter is None:
            raise ValueError(f"chat_format {name!r} is not known; use None (the model's own "
                             f"template) or one of {known_chat_formats()}")
        return FormatterAdapter(formatter, tokenizer, f"chat_format {name!r}"), name
    return ChatFormatter.from_metadata({"tokenizer.chat_template": template[0]}, tokenizer,
                                       extra_stop=template[1],
                                       source=f"chat_format {name_!r}"), name
