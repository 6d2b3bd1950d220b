"""Chat prompts: messages -> prompt text through the model's Jinja2 template.

The template is ``tokenizer.chat_template`` from the GGUF file. Templates come
with downloaded models, so they are compiled and rendered in template.py's
bounded sandbox: jinja2's ImmutableSandboxedEnvironment (no Python internals,
no mutating our data) that folds nothing expensive at compile time and
renders under a time limit (``time_limit``, 2 s) and a limit on the text it
creates (``max_output`` characters plus 8 times the messages' own). Every
failure, from a syntax error to a runaway loop, a MemoryError or a
RecursionError, is a ChatTemplateError that names the template (``source``).
Variables: ``messages``, ``add_generation_prompt``, ``bos_token``,
``eos_token``, ``raise_exception`` and ``strftime_now``. A model without a
template gets ChatML. The result also says where generation
should stop: the EOS text and the end-of-generation tokens' texts that the
template uses, and the EOG token ids.

The rendered prompt already holds whatever BOS the template wants, so it is
tokenized with add_bos=False and special=True (``ChatPrompt.added_special``),
but control-token texts that came from the caller's strings stay plain text
(``ChatPrompt.segments``, literal.py): a user cannot forge a turn.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Sequence

import jinja2

from .literal import Literals, Segments, joined
from .template import BoundedEnvironment, Budget, RenderLimitError, compile_template, render
from .template_limits import text_size

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


TIME_LIMIT = 2.0            # seconds one render may take
MAX_OUTPUT = 1 << 20        # characters a render may create beyond 8x the messages' own
MAX_TEMPLATE = 1 << 18      # characters of template (real ones are under 20 K; jinja
                            # compiles some 20 K per second)
GGUF_SOURCE = "the model's chat template (GGUF tokenizer.chat_template)"
FALLBACK_SOURCE = "the ChatML fallback template (the model has none)"


class ChatTemplateError(ValueError):
    """The template does not compile, refused the messages (raise_exception),
    went over a render limit or failed to render. ``source`` names the template."""

    def __init__(self, message: str, source: str = "the chat template") -> None:
        super().__init__(message)
        self.source = source


@dataclass(slots=True)
class ChatPrompt:
    prompt: str                        # the rendered text
    stop: list[str]                    # stop strings for the completion
    stop_token_ids: list[int] = field(default_factory=list)
    added_special: bool = True         # the template placed BOS itself: add none
    segments: Segments | None = None   # prompt cut into (text, special parsing allowed);
                                       # None: all of it (tokenize with special=True)


class _Refused(Exception):
    """raise_exception() from the template (not a ValueError: filters catch those)."""


def _raise_exception(message: str) -> None:
    raise _Refused(str(message))


def _strftime_now(fmt: str) -> str:
    if not isinstance(fmt, str) or len(fmt) > 256:
        raise TypeError("strftime_now takes a format string of at most 256 characters")
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
                 stop: Sequence[str] = (), stop_token_ids: Sequence[int] = (), *,
                 source: str | None = None, time_limit: float = TIME_LIMIT,
                 max_output: int = MAX_OUTPUT, max_template: int = MAX_TEMPLATE,
                 control_texts: Sequence[str] = ()) -> None:
        self.is_fallback = not template
        self.control_texts = tuple(control_texts)   # kept literal in the caller's strings
        self.template = template or CHATML_TEMPLATE
        self.source = source or (FALLBACK_SOURCE if self.is_fallback else "the chat template")
        if len(self.template) > max_template:
            raise ChatTemplateError(f"{self.source} is {len(self.template):,} characters long, "
                                    f"over the limit of {max_template:,}", self.source)
        if not time_limit > 0 or max_output < 0:
            raise ValueError(f"time_limit must be > 0 and max_output >= 0, got {time_limit} "
                             f"and {max_output}")
        self.time_limit, self.max_output = float(time_limit), int(max_output)
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.stop_token_ids = sorted(set(int(i) for i in stop_token_ids))
        stops = [eos_token] if eos_token else []
        if self.is_fallback:
            stops.append("<|im_end|>")
        stops.extend(stop)
        self.stop = list(dict.fromkeys(s for s in stops if s))
        env = BoundedEnvironment(loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True)
        try:
            self._compiled = compile_template(env, self.template)
        except Exception as e:      # syntax errors, but also RecursionError, MemoryError...
            what = "does not parse" if isinstance(e, jinja2.TemplateSyntaxError) \
                else "does not compile"
            raise self._error(what, e) from e

    def _error(self, what: str, e: BaseException) -> ChatTemplateError:
        detail = str(e) if isinstance(e, (jinja2.TemplateError, RenderLimitError)) \
            else f"{type(e).__name__}: {e}"
        return ChatTemplateError(f"{self.source} {what}: {detail}", self.source)

    @classmethod
    def from_metadata(cls, meta: dict, tokenizer=None, *, source: str | None = None,
                      extra_stop: Sequence[str] = (), **limits: Any) -> "ChatFormatter":
        """From GGUF metadata; tokenizer (pyllamakv.tokenizer.Tokenizer) gives
        the BOS / EOS texts and the end-of-generation tokens. source names the
        template in errors (default: the GGUF file's); extra_stop: more texts
        that end a turn (a named chat format's); limits: time_limit,
        max_output, max_template."""
        template = meta.get("tokenizer.chat_template")
        if template is not None and not isinstance(template, str):
            raise ValueError("tokenizer.chat_template is not a string")
        limits["source"] = source or (GGUF_SOURCE if template else None)
        if tokenizer is None:
            return cls(template, stop=extra_stop, **limits)

        def text(i):
            return tokenizer.token_text(i) if i is not None else ""

        written = template or CHATML_TEMPLATE
        eog = sorted(tokenizer.eog_ids)
        # an EOG token the template writes out ends a turn: stop on its text
        stop = [tokenizer.token_text(i) for i in eog if tokenizer.token_text(i) in written]
        stop += list(extra_stop)
        control = [tokenizer.token_text(i) for i in range(tokenizer.n_vocab)
                   if tokenizer.is_control(i)]
        return cls(template, bos_token=text(tokenizer.bos_id), eos_token=text(tokenizer.eos_id),
                   stop=stop, stop_token_ids=eog, control_texts=control, **limits)

    def format(self, messages: Sequence[dict], add_generation_prompt: bool = True,
               **extra: Any) -> ChatPrompt:
        """Render messages; extra keyword variables (e.g. tools) reach the template."""
        messages = validate_messages(messages)
        literals = Literals(self.control_texts)
        messages, extra = literals.protect(messages), literals.protect(extra)
        own = text_size((messages, extra), 1 << 62)
        budget = Budget(self.time_limit, self.max_output + 8 * own)
        try:
            prompt = render(self._compiled, budget,
                            **extra, messages=messages, add_generation_prompt=add_generation_prompt,
                            bos_token=self.bos_token, eos_token=self.eos_token,
                            raise_exception=_raise_exception, strftime_now=_strftime_now)
        except _Refused as e:
            raise ChatTemplateError(f"{self.source} refused the messages: {e}", self.source) \
                from None
        except RenderLimitError as e:
            raise self._error("went over a render limit", e) from None
        except MemoryError as e:    # raised below, once the frames holding big values are gone
            failure = self._error("failed to render", e)
        except Exception as e:      # UndefinedError, TypeError, RecursionError...
            raise self._error("failed to render", e) from e
        else:
            segments = literals.segments(prompt)
            return ChatPrompt(joined(segments), list(self.stop), list(self.stop_token_ids),
                              segments=segments if len(segments) > 1 else None)
        raise failure
