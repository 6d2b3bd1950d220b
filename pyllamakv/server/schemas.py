"""Request bodies of the OpenAI endpoints, their checks, and OpenAI-style errors.

The models accept OpenAI's field names and types and check the ranges the
sampler needs, so a bad request is answered with 400 before it waits for a
slot. Structured output (``response_format``, llama-server's ``grammar`` and
``json_schema``) is compiled here, so a schema or grammar that does not
compile is a 400 naming its field. Fields OpenAI has and this server does not
implement (``suffix``, ``audio``, ``prediction``, ...) are refused by name
rather than ignored; unknown fields are ignored, as OpenAI-compatible servers do.
"""
from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from ..api.grammar import GrammarError, LlamaGrammar, response_format_grammar

from .fanout import MAX_N
from .speculation import SpecRequest


def error_body(message: str, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


class Unsupported(ValueError):
    """A field this server knows but does not implement; .param names it."""

    code = "unsupported_parameter"

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


class Invalid(Unsupported):
    """A field with a value that cannot be used (a grammar that does not compile)."""

    code = "invalid_value"


# OpenAI fields this server cannot honour, refused unless given their default
REFUSED = {"suffix": None, "audio": None, "prediction": None, "web_search_options": None,
           "best_of": 1, "parallel_tool_calls": True, "store": False, "service_tier": "auto",
           "modalities": ["text"], "dimensions": None, "reasoning_effort": None}


def refuse(body: dict, names) -> None:
    """Unsupported for the first of names whose value in body is not its default."""
    for k in names:
        if k in body and body[k] is not None and body[k] != REFUSED[k] and \
                not (k == "service_tier" and body[k] == "default"):
            raise Unsupported(k, f"{k} is not supported by this server (got {body[k]!r})")


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=0.8, ge=0.0, le=2.0)
    top_p: float = Field(default=0.95, ge=0.0, le=1.0)
    top_k: int = Field(default=40, ge=-1)   # -1 or 0: off, as llama.cpp
    min_p: float = Field(default=0.05, ge=0.0, le=1.0)
    typical_p: float = Field(default=1.0, ge=0.0, le=1.0)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    repeat_penalty: float = Field(default=1.0, gt=0.0, le=10.0)
    seed: int | None = Field(default=None, ge=-1, le=2**63 - 1)
    stop: str | list[str] | None = None
    stream: bool = False
    n: int = Field(default=1, ge=1, le=MAX_N)   # choices per prompt (fanout.py)
    logit_bias: dict[str, float] | None = None
    timeout: float | None = Field(default=None, gt=0.0)   # seconds; only lowers the server's
    # speculative decoding, llama-server's field names (speculation.py)
    spec_type: str | None = Field(default=None, alias="speculative.type")
    spec_n_max: int | None = Field(default=None, alias="speculative.n_max")
    spec_n_min: int = Field(default=0, alias="speculative.n_min")
    stream_options: dict | None = None          # {"include_usage": bool}
    # structured output: OpenAI's response_format, llama-server's grammar / json_schema
    response_format: dict | None = None
    grammar: str | None = None
    json_schema: dict | None = None
    user: str | None = None                     # OpenAI's end-user id: logged nowhere, kept nowhere

    @field_validator("stream_options")
    @classmethod
    def _stream_options(cls, v):
        for k, x in (v or {}).items():
            if k != "include_usage":
                raise Unsupported(f"stream_options.{k}", f"stream_options.{k} is not supported")
            if not isinstance(x, bool):
                raise ValueError("stream_options.include_usage must be a boolean")
        return v

    @property
    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))

    def constraint(self) -> LlamaGrammar | None:
        """The grammar response_format, grammar or json_schema ask for (one of them)."""
        given = [k for k in ("response_format", "grammar", "json_schema")
                 if getattr(self, k) is not None and not (
                     k == "response_format" and getattr(self, k).get("type") == "text")]
        if len(given) > 1:
            raise Unsupported(given[1], f"give one of response_format, grammar, json_schema; "
                                        f"got {', '.join(given)}")
        if not given:
            return None
        try:
            if given[0] == "grammar":
                return LlamaGrammar.from_string(self.grammar)
            if given[0] == "json_schema":
                return LlamaGrammar.from_json_schema(self.json_schema)
            return response_format_grammar(self.response_format)
        except GrammarError as e:
            raise Invalid(given[0], str(e)) from None

    @field_validator("stop")
    @classmethod
    def _stops(cls, v):
        if isinstance(v, list) and len(v) > 16:
            raise ValueError("at most 16 stop sequences")
        return v

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, v):
        for k, b in (v or {}).items():
            if not (k.isascii() and k.isdigit()):     # "²".isdigit() is true
                raise ValueError(f"logit_bias keys are token ids, got {k!r}")
            if not -100.0 <= b <= 100.0:
                raise ValueError(f"logit_bias values are in [-100, 100], got {b}")
        return v

    _grammar: Any = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _checks(self):
        self.speculative()      # its checks, before the request queues
        self._grammar = self.constraint()     # compiled once, before the request queues
        return self

    def speculative(self) -> SpecRequest:
        if self.wants_logprobs:    # the drafted tokens' logits are not the sampled ones
            return SpecRequest("none")
        return SpecRequest(self.spec_type, self.spec_n_max, self.spec_n_min)

    @property
    def wants_logprobs(self) -> bool:
        return False

    @property
    def max_new(self) -> int | None:
        return self.max_tokens

    def sampling_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for Llama.create_completion / create_chat_completion."""
        return dict(max_tokens=self.max_new, grammar=self._grammar, temperature=self.temperature, top_p=self.top_p,
                    top_k=self.top_k, min_p=self.min_p, typical_p=self.typical_p,
                    presence_penalty=self.presence_penalty,
                    frequency_penalty=self.frequency_penalty,
                    repeat_penalty=self.repeat_penalty, seed=self.seed, stop=self.stop,
                    logit_bias={int(k): b for k, b in (self.logit_bias or {}).items()} or None)


class CompletionRequest(_Sampling):
    prompt: Union[str, list[int], list[str], list[list[int]]]   # a list: one choice each
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=20)

    @model_validator(mode="before")
    @classmethod
    def _refused(cls, body):
        if isinstance(body, dict):
            refuse(body, ("suffix", "best_of"))
        return body

    @model_validator(mode="after")
    def _supported(self):
        if isinstance(self.prompt, list) and len(self.prompt) == 1 \
                and isinstance(self.prompt[0], (str, list)):
            self.prompt = self.prompt[0]
        if isinstance(self.prompt, list) and (not self.prompt or any(
                isinstance(p, list) and not p for p in self.prompt)):
            raise ValueError("prompt is empty")
        if self.logprobs is not None and self.echo:
            raise Unsupported("echo", "echo with logprobs (the prompt's logprobs) is not "
                                      "supported by this server")
        return self

    @property
    def wants_logprobs(self) -> bool:
        return self.logprobs is not None

    def kwargs(self) -> dict[str, Any]:
        return dict(prompt=self.prompt, echo=self.echo, logprobs=self.logprobs,
                    **self.sampling_kwargs())


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "developer", "tool", "function"]
    content: Union[str, list[TextPart], None] = None
    name: str | None = None
    tool_calls: list[dict] | None = None
    tool_call_id: str | None = None
    function_call: dict | None = None

    def as_dict(self) -> dict:
        content = self.content
        if isinstance(content, list):
            content = "".join(p.text for p in content)
        out = {"role": "system" if self.role == "developer" else self.role,
               "content": content or ""}
        for k in ("name", "tool_calls", "tool_call_id", "function_call"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        if self.content is None and (self.tool_calls or self.function_call):
            out["content"] = None
        return out


class ChatRequest(_Sampling):
    messages: list[Message] = Field(min_length=1)
    temperature: float = Field(default=0.2, ge=0.0, le=2.0)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    functions: list[dict] | None = None
    function_call: str | dict | None = None

    @model_validator(mode="before")
    @classmethod
    def _refused(cls, body):
        if isinstance(body, dict):
            refuse(body, ("audio", "prediction", "web_search_options", "parallel_tool_calls",
                          "store", "service_tier", "modalities", "reasoning_effort"))
        return body

    @model_validator(mode="after")
    def _supported(self):
        if len(self.messages) > 1 and {m.role for m in self.messages[-2:]} == {"assistant"}:
            # refused as llama-server refuses it (where it continues a last assistant
            # message, two at the end leave none to continue)
            raise Invalid("messages", "two or more assistant messages at the end of the "
                                      "list: merge them into one")
        if self.top_logprobs is not None and not self.logprobs:
            raise Invalid("top_logprobs", "top_logprobs needs logprobs: true")
        if (self.tools or self.functions) and self._grammar is not None:
            raise Unsupported("response_format", "tools and a response_format / grammar / "
                                                 "json_schema cannot be combined")
        return self

    @property
    def wants_logprobs(self) -> bool:
        return self.logprobs

    @property
    def max_new(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def kwargs(self) -> dict[str, Any]:
        out = dict(messages=[m.as_dict() for m in self.messages], logprobs=self.logprobs,
                   top_logprobs=self.top_logprobs or (0 if self.logprobs else None),
                   **self.sampling_kwargs())
        for k in ("tools", "tool_choice", "functions", "function_call"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        return out


def with_defaults(body, s):
    """The server's --temp / --seed / -n (settings s) where the request gives none."""
    given = body.model_fields_set
    if s.temperature is not None and "temperature" not in given:
        body.temperature = s.temperature
    if s.seed is not None and "seed" not in given:
        body.seed = s.seed
    if s.n_predict is not None and not given & {"max_tokens", "max_completion_tokens"}:
        body.max_tokens = None if s.n_predict < 0 else s.n_predict
    return body
