"""The body of /v1/embeddings (OpenAI's), checked before it queues."""
from __future__ import annotations

from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from .schemas import Unsupported, refuse


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    input: Union[str, list[str]]
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    user: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _refused(cls, body):
        if isinstance(body, dict):
            refuse(body, ("dimensions",))
            x = body.get("input")
            if isinstance(x, list) and x and all(isinstance(t, int) or (
                    isinstance(t, list) and all(isinstance(i, int) for i in t)) for t in x):
                raise Unsupported("input", "token ids as input are not supported by this "
                                           "server's embeddings: give text")
        return body

    @field_validator("input")
    @classmethod
    def _nonempty(cls, v):
        if isinstance(v, list) and not v:
            raise ValueError("input is an empty list")
        if isinstance(v, list) and len(v) > 2048:
            raise ValueError("at most 2048 inputs")
        return v
