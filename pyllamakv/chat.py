"""Chat prompts: messages -> prompt text through the model's Jinja2 template.

The template is ``tokenizer.chat_template`` from the GGUF file, rendered in
jinja2's ImmutableSandboxedEnvironment (templates come with downloaded
models: they must not reach Python internals or mutate our data) with the
variables chat templates expect: ``messages``, ``add_generation_prompt``,
``bos_token``, ``eos_token``, ``raise_exception`` and ``strftime_now``. A
model without a template gets ChatML. The result also says where generation
should stop: the EOS text and the end-of-generation tokens' texts that the
template uses, and the EOG token ids.

The rendered prompt already holds whatever BOS the template wants, so it is
tokenized with add_bos=False and special=True (``ChatPrompt.added_special``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Sequence

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


class ChatTemplateError(ValueError):
    """The template refused the messages (raise_exception) or failed to render."""


@dataclass(slots=True)
class ChatPrompt:
    prompt: str                        # text to tokenize with special=True
    stop: list[str]                    # stop strings for the completion
    stop_token_ids: list[int] = field(default_factory=list)
    added_special: bool = True         # the template placed BOS itself: add none


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(str(message))


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def validate_messages(messages: Any) -> list[dict]:
    """Check messages is a non-empty list of {'role': str, 'content': str, ...}."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ValueError(f"messages must be a list of dicts, got {type(messages).__name__}")
    if len(messages) == 0:
        raise ValueError("messages is empty: give at least one message")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ValueError(f"messages[{i}] must be a dict with 'role' and 'content', "
                             f"got {type(m).__name__}")
        for key in ("role", "content"):
            if key not in m:
                raise ValueError(f"messages[{i}] has no {key!r}")
            if not isinstance(m[key], str):
                raise ValueError(f"messages[{i}][{key!r}] must be a str, "
                                 f"got {type(m[key]).__name__}")
        if not m["role"]:
            raise ValueError(f"messages[{i}]['role'] is empty")
    return list(messages)


class ChatFormatter:
    """Renders one model's chat template."""

    def __init__(self, template: str | None, bos_token: str = "", eos_token: str = "",
                 stop: Sequence[str] = (), stop_token_ids: Sequence[int] = ()) -> None:
        self.is_fallback = not template
        self.template = template or CHATML_TEMPLATE
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.stop_token_ids = sorted(set(int(i) for i in stop_token_ids))
        stops = [eos_token] if eos_token else []
        if self.is_fallback:
            stops.append("<|im_end|>")
        stops.extend(stop)
        self.stop = list(dict.fromkeys(s for s in stops if s))
        env = ImmutableSandboxedEnvironment(loader=jinja2.BaseLoader(), trim_blocks=True,
                                            lstrip_blocks=True)
        try:
            self._compiled = env.from_string(self.template)
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"the chat template does not parse: {e}") from e

    @classmethod
    def from_metadata(cls, meta: dict, tokenizer=None,
                      extra_stop: Sequence[str] = ()) -> "ChatFormatter":
        """From GGUF metadata; tokenizer (pyllamakv.tokenizer.Tokenizer) gives
        the BOS / EOS texts and the end-of-generation tokens; extra_stop: more
        texts that end a turn (a named chat format's)."""
        template = meta.get("tokenizer.chat_template")
        if template is not None and not isinstance(template, str):
            raise ValueError("tokenizer.chat_template is not a string")
        if tokenizer is None:
            return cls(template, stop=extra_stop)

        def text(i):
            return tokenizer.token_text(i) if i is not None else ""

        source = template or CHATML_TEMPLATE
        eog = sorted(tokenizer.eog_ids)
        # an EOG token the template writes out ends a turn: stop on its text
        stop = [tokenizer.token_text(i) for i in eog if tokenizer.token_text(i) in source]
        stop += list(extra_stop)
        return cls(template, bos_token=text(tokenizer.bos_id), eos_token=text(tokenizer.eos_id),
                   stop=stop, stop_token_ids=eog)

    def format(self, messages: Sequence[dict], add_generation_prompt: bool = True,
               **extra: Any) -> ChatPrompt:
        """Render messages; extra keyword variables (e.g. tools) reach the template."""
        messages = validate_messages(messages)
        try:
            prompt = self._compiled.render(
                **extra, messages=messages, add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token, eos_token=self.eos_token,
                raise_exception=_raise_exception, strftime_now=_strftime_now)
        except ChatTemplateError:
            raise
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"the chat template failed to render: {e}") from e
        return ChatPrompt(prompt, list(self.stop), list(self.stop_token_ids))
