"""Request bodies of the OpenAI endpoints, their checks, and OpenAI-style errors.

The models accept OpenAI's field names and types and check the ranges the
sampler needs, so a bad request is answered with 400 before it waits for a
slot. Fields OpenAI has and this server does not implement are refused by name
(logprobs, suffix, tools) rather than ignored; unknown fields are
ignored, as OpenAI-compatible servers do.
"""
from __future__ import annotations

from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .fanout import MAX_N
from .speculation import SpecRequest


def error_body(message: str, type: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


class Unsupported(ValueError):
    """A field this server knows but does not implement; .param names it."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


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

    @model_validator(mode="after")
    def _checks(self):
        self.speculative()      # its checks, before the request queues
        return self

    def speculative(self) -> SpecRequest:
        return SpecRequest(self.spec_type, self.spec_n_max, self.spec_n_min)

    def sampling_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for Llama.create_completion / create_chat_completion."""
        return dict(max_tokens=self.max_tokens, temperature=self.temperature, top_p=self.top_p,
                    top_k=self.top_k, min_p=self.min_p, typical_p=self.typical_p,
                    presence_penalty=self.presence_penalty,
                    frequency_penalty=self.frequency_penalty,
                    repeat_penalty=self.repeat_penalty, seed=self.seed, stop=self.stop,
                    logit_bias={int(k): b for k, b in (self.logit_bias or {}).items()} or None)


class CompletionRequest(_Sampling):
    prompt: Union[str, list[int], list[str], list[list[int]]]   # a list: one choice each
    echo: bool = False
    logprobs: int | None = None
    suffix: str | None = None

    @model_validator(mode="after")
    def _supported(self):
        if isinstance(self.prompt, list) and len(self.prompt) == 1 \
                and isinstance(self.prompt[0], (str, list)):
            self.prompt = self.prompt[0]
        if isinstance(self.prompt, list) and (not self.prompt or any(
                isinstance(p, list) and not p for p in self.prompt)):
            raise ValueError("prompt is empty")
        if self.logprobs is not None:
            raise Unsupported("logprobs", "logprobs are not supported by this server")
        if self.suffix is not None:
            raise Unsupported("suffix", "suffix is not supported")
        return self

    def kwargs(self) -> dict[str, Any]:
        return dict(prompt=self.prompt, echo=self.echo, **self.sampling_kwargs())


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: Union[str, list[TextPart], None] = None

    def as_dict(self) -> dict:
        content = self.content
        if isinstance(content, list):
            content = "".join(p.text for p in content)
        return {"role": "system" if self.role == "developer" else self.role,
                "content": content or ""}


class ChatRequest(_Sampling):
    messages: list[Message] = Field(min_length=1)
    temperature: float = Field(default=0.2, ge=0.0, le=2.0)
    logprobs: bool = False
    top_logprobs: int | None = None
    tools: list | None = None

    @model_validator(mode="after")
    def _supported(self):
        if self.logprobs or self.top_logprobs is not None:
            raise Unsupported("logprobs", "logprobs are not supported by this server")
        if self.tools:
            raise Unsupported("tools", "tools (function calling) are not supported")
        return self

    def kwargs(self) -> dict[str, Any]:
        return dict(messages=[m.as_dict() for m in self.messages], **self.sampling_kwargs())
