"""Crafting GGUF files byte by byte, for tests of the reader on bad input.

A ``Spec`` is a file taken apart (header, metadata, tensor infos, data
section); ``serialize`` writes it back and can record where every count,
length, type id, offset and dimension lies, so a test (or the fuzzer) can
overwrite any of them. Specs are read with gguf-py's reader (the reference),
not with the reader under test.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType as V

SCALAR = {V.UINT8: "<B", V.INT8: "<b", V.UINT16: "<H", V.INT16: "<h", V.UINT32: "<I",
          V.INT32: "<i", V.FLOAT32: "<f", V.BOOL: "<?", V.UINT64: "<Q", V.INT64: "<q",
          V.FLOAT64: "<d"}


@dataclass
class Spec:
    kvs: list[list]                   # [key, value type, value, element type or None]
    tensors: list[list]               # [name, shape (ggml order), type id, data offset]
    data: bytes                       # the data section
    version: int = 3
    alignment: int = 32

    def kv(self, key: str) -> list:
        return next(kv for kv in self.kvs if kv[0] == key)

    def set(self, key: str, vtype: int, value: Any, etype: int | None = None) -> None:
        for kv in self.kvs:
            if kv[0] == key:
                kv[1:] = [vtype, value, etype]
                return
        self.kvs.append([key, vtype, value, etype])

    def drop(self, key: str) -> None:
        self.kvs = [kv for kv in self.kvs if kv[0] != key]

    def tensor(self, name: str) -> list:
        return next(t for t in self.tensors if t[0] == name)

    def tensor_bytes(self, name: str, nbytes: int) -> np.ndarray:
        """A writable copy of a tensor's first nbytes; put back with put_bytes."""
        off = self.tensor(name)[3]
        return np.frombuffer(self.data[off:off + nbytes], np.uint8).copy()

    def put_bytes(self, name: str, raw: np.ndarray) -> None:
        off = self.tensor(name)[3]
        b = raw.tobytes()
        self.data = self.data[:off] + b + self.data[off + len(b):]


def read_spec(path: str | Path) -> Spec:
    r = GGUFReader(str(path))
    kvs = []
    for key, f in r.fields.items():
        if key.startswith("GGUF."):
            continue
        vtype = f.types[0]
        etype = f.types[-1] if vtype == V.ARRAY else None
        kvs.append([key, int(vtype), f.contents(), None if etype is None else int(etype)])
    start = min((int(t.data_offset) for t in r.tensors), default=len(r.data))
    tensors = [[t.name, tuple(int(d) for d in t.shape), int(t.tensor_type),
                int(t.data_offset) - start] for t in r.tensors]
    return Spec(kvs, tensors, bytes(r.data[start:]), alignment=int(r.alignment))


@dataclass
class Fields:
    """Where serialize put each field: (kind, label, offset, size) rows."""
    rows: list[tuple[str, str, int, int]] = field(default_factory=list)

    def add(self, kind: str, label: str, offset: int, size: int) -> None:
        self.rows.append((kind, label, offset, size))


def _string(out: bytearray, s: str | bytes, fields: Fields | None, label: str) -> None:
    b = s.encode() if isinstance(s, str) else s
    if fields is not None:
        fields.add("length", label, len(out), 8)
    out += struct.pack("<Q", len(b)) + b


def _value(out: bytearray, vtype: int, value: Any, fields: Fields | None, label: str) -> None:
    if vtype == V.STRING:
        _string(out, value, fields, label)
    else:
        if fields is not None:
            fields.add("scalar", label, len(out), struct.calcsize(SCALAR[vtype]))
        out += struct.pack(SCALAR[vtype], value)


def serialize(spec: Spec, fields: Fields | None = None) -> bytes:
    out = bytearray(b"GGUF")
    for kind, fmt, v in (("version", "<I", spec.version), ("count", "<Q", len(spec.tensors)),
                         ("count", "<Q", len(spec.kvs))):
        if fields is not None:
            fields.add(kind, "header", len(out), struct.calcsize(fmt))
        out += struct.pack(fmt, v)
    for key, vtype, value, etype in spec.kvs:
        _string(out, key, fields, f"key {key}")
        if fields is not None:
            fields.add("type", key, len(out), 4)
        out += struct.pack("<I", vtype)
        if vtype == V.ARRAY:
            if fields is not None:
                fields.add("type", f"{key}[]", len(out), 4)
                fields.add("count", key, len(out) + 4, 8)
            out += struct.pack("<IQ", etype, len(value))
            if etype in (V.STRING,) or fields is not None or etype not in SCALAR:
                for i, x in enumerate(value):
                    _value(out, etype, x, fields if i < 4 else None, f"{key}[{i}]")
            else:
                out += np.asarray(value, SCALAR[etype]).tobytes()
        else:
            _value(out, vtype, value, fields, key)
    for name, shape, tid, offset in spec.tensors:
        _string(out, name, fields, f"name {name}")
        if fields is not None:
            fields.add("ndims", name, len(out), 4)
        out += struct.pack("<I", len(shape))
        for d in shape:
            if fields is not None:
                fields.add("dim", name, len(out), 8)
            out += struct.pack("<Q", d)
        if fields is not None:
            fields.add("tensor_type", name, len(out), 4)
            fields.add("offset", name, len(out) + 4, 8)
        out += struct.pack("<IQ", tid, offset)
    out += b"\0" * (-len(out) % spec.alignment)
    return bytes(out + spec.data)


def write(spec: Spec, path: str | Path) -> Path:
    Path(path).write_bytes(serialize(spec))
    return Path(path)


# ---------------------------------------------------------------- a small vocab

def add_spm_vocab(spec: Spec, n_vocab: int, seed: int = 0) -> None:
    """A SentencePiece ('llama') vocab of n_vocab tokens: <unk> <s> </s>, the
    256 byte tokens, then random pieces of letters."""
    rng = np.random.default_rng(seed)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    letters = "abcdefghij"
    while len(tokens) < n_vocab:
        t = "\u2581" * int(rng.integers(0, 2)) + "".join(
            rng.choice(list(letters), int(rng.integers(1, 4))))
        if t not in tokens:
            tokens.append(t)
            types.append(1)
    scores = (-np.arange(n_vocab, dtype=np.float32) / 10).tolist()
    spec.set("tokenizer.ggml.model", V.STRING, "llama")
    spec.set("tokenizer.ggml.tokens", V.ARRAY, tokens[:n_vocab], V.STRING)
    spec.set("tokenizer.ggml.scores", V.ARRAY, scores, V.FLOAT32)
    spec.set("tokenizer.ggml.token_type", V.ARRAY, types[:n_vocab], V.INT32)
    spec.set("tokenizer.ggml.bos_token_id", V.UINT32, 1)
    spec.set("tokenizer.ggml.eos_token_id", V.UINT32, 2)
    spec.set("tokenizer.ggml.unknown_token_id", V.UINT32, 0)


def write_tiny_spm_llama(d: str | Path) -> Path:
    """d/tiny.gguf: a 1.4 MB random llama model (Q8_0, tiny_models) with a small
    SentencePiece vocab (320 tokens); d/plain.gguf is the model before the vocab."""
    from gguf import GGMLQuantizationType as T
    from tiny_models import write_tiny_model
    spec = read_spec(write_tiny_model(Path(d) / "plain.gguf", "llama", T.Q8_0))
    add_spm_vocab(spec, 320)
    return write(spec, Path(d) / "tiny.gguf")
