"""Reading GGUF files: metadata as plain Python values and tensors as views.

The file is memory-mapped by the ``gguf`` package; tensors are handed to the
core as pointers into that map (nothing is copied on the CPU), so a
``GGUFFile`` must outlive every model made from it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import gguf
from gguf import GGUFValueType


class GGUFError(ValueError):
    """The file is missing, truncated or not a GGUF model this package can run."""


@dataclass(slots=True)
class TensorInfo:
    name: str
    type: int                 # ggml type id
    shape: tuple[int, ...]    # ggml order: shape[0] is the contiguous dimension
    data: np.ndarray          # uint8 view into the memory map
    nbytes: int


def _field_value(field: Any) -> Any:
    types = field.types
    if not types:
        return None
    if types[0] == GGUFValueType.ARRAY:
        sub = types[-1]
        if sub == GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8", "replace") for i in field.data]
        return [field.parts[i].tolist()[0] for i in field.data]
    if types[0] == GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8", "replace")
    v = field.parts[field.data[0]].tolist()[0]
    if types[0] == GGUFValueType.BOOL:
        return bool(v)
    return v


class GGUFFile:
    """A GGUF file opened read-only: ``metadata`` (dict) and ``tensors`` (list)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"model file not found: {self.path}")
        try:
            self._reader = gguf.GGUFReader(self.path, "r")
        except Exception as e:  # the gguf package raises many kinds
            raise GGUFError(f"{self.path}: not a readable GGUF file "
                            f"(truncated or corrupt?): {e}") from e
        self.metadata: dict[str, Any] = {}
        for name, field in self._reader.fields.items():
            if name.startswith("GGUF."):
                continue
            try:
                self.metadata[name] = _field_value(field)
            except Exception as e:
                raise GGUFError(f"{self.path}: metadata key {name!r} is unreadable: {e}") from e
        self.tensors: list[TensorInfo] = []
        for t in self._reader.tensors:
            data = t.data
            raw = data.view(np.uint8).reshape(-1) if data.size else np.zeros(0, np.uint8)
            self.tensors.append(TensorInfo(
                name=t.name, type=int(t.tensor_type),
                shape=tuple(int(x) for x in t.shape), data=raw, nbytes=int(t.n_bytes)))

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def arch_key(self, suffix: str, default: Any = None) -> Any:
        """``{arch}.{suffix}``, e.g. arch_key("block_count")."""
        return self.metadata.get(f"{self.architecture}.{suffix}", default)

    def close(self) -> None:
        self._reader = None
        self.tensors = []
