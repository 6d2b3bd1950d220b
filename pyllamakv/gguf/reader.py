"""Reading GGUF files: metadata as plain Python values and tensors as views.

A small reader of our own over a read-only memory map. Files come from
strangers, so every count and length is checked against the bytes that
remain before anything is allocated or iterated: any file loads or fails in
time proportional to its size. Numeric arrays are read with one numpy call;
string arrays (token lists, merges) by one pass over their length prefixes.
Tensor infos are checked as ggml checks them: unique names, 1-4 positive
dimensions, a known type whose block divides the rows, and data packed in
order at aligned offsets inside the file.

Tensors are handed to the core as pointers into the map (nothing is copied on
the CPU), so a ``GGUFFile`` must outlive every model made from it.

A mapped file that is truncated on disk kills the process (SIGBUS) at the next
read of a page past its new end, and one overwritten in place silently changes
the weights (llama.cpp's mmap shares both). The file stays open, and
``check_unchanged`` (run by the core's wrapper before every decode) raises
``ModelFileChangedError`` once the size or modification time of the mapped
file differs from when it was opened. Replacing the file by a rename (a new
inode; how downloads and ``cp --remove-destination`` write) is harmless: the
map keeps the old file and is not reported. A change during one decode call is
not caught before that call (a race this check narrows but cannot close; copy
the file elsewhere first to rule it out).
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelFileChangedError
from .types import (ARRAY, BOOL, FLOAT_TYPES, SCALAR_DTYPES, STRING, TENSOR_TYPES, UINT32,
                         VALUE_TYPE_NAMES)

MAX_DIMS = 4
DEFAULT_ALIGNMENT = 32
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")


class GGUFError(ValueError):
    """The file is missing, truncated or not a GGUF model this package can run."""


@dataclass(slots=True)
class TensorInfo:
    name: str
    type: int                 # ggml type id
    shape: tuple[int, ...]    # ggml order: shape[0] is the contiguous dimension
    data: np.ndarray          # (nbytes,) uint8 view into the memory map
    nbytes: int
    offset: int = 0           # of the data, from the start of the file


# ---------------------------------------------------------------- the cursor

class _Cursor:
    """Reads little-endian fields from buf, refusing to pass its end."""

    def __init__(self, buf: mmap.mmap, path: Path):
        self.buf, self.path, self.pos, self.end = buf, path, 0, len(buf)

    def fail(self, what: str) -> GGUFError:
        return GGUFError(f"{self.path}: {what}")

    def need(self, n: int, what: str) -> None:
        if n > self.end - self.pos:
            raise self.fail(f"{what} needs {n} bytes at offset {self.pos}, but only "
                            f"{self.end - self.pos} remain (truncated or corrupt?)")

    def u32(self, what: str) -> int:
        self.need(4, what)
        (v,) = _U32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return v

    def u64(self, what: str) -> int:
        self.need(8, what)
        (v,) = _U64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return v

    def raw_string(self, what: str) -> bytes:
        n = self.u64(f"the length of {what}")
        self.need(n, f"{what} ({n} bytes)")
        s = self.buf[self.pos:self.pos + n]
        self.pos += n
        return s

    def name(self, what: str) -> str:
        raw = self.raw_string(what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} at offset {self.pos - len(raw)} is not UTF-8: {raw[:40]!r}")

    def value(self, vtype: int, key: str) -> Any:
        if vtype == STRING:
            return self.raw_string(f"the value of {key!r}").decode("utf-8", "replace")
        if vtype == ARRAY:
            return self.array(key)
        dtype = SCALAR_DTYPES.get(vtype)
        if dtype is None:
            raise self.fail(f"metadata key {key!r} has unknown value type {vtype}")
        size = np.dtype(dtype).itemsize
        self.need(size, f"the value of {key!r}")
        v = np.frombuffer(self.buf, dtype, 1, self.pos)[0].item()
        self.pos += size
        return bool(v) if vtype == BOOL else v

    def array(self, key: str) -> list:
        etype = self.u32(f"the element type of {key!r}")
        n = self.u64(f"the length of {key!r}")
        if etype == STRING:
            self.need(8 * n, f"{key!r}, an array of {n} strings,")
            return self.strings(n, key)
        dtype = SCALAR_DTYPES.get(etype)
        if dtype is None:
            what = "nested arrays" if etype == ARRAY else f"unknown element type {etype}"
            raise self.fail(f"metadata key {key!r}: {what} are not supported")
        size = np.dtype(dtype).itemsize
        self.need(n * size, f"{key!r}, an array of {n} {VALUE_TYPE_NAMES[etype]},")
        a = np.frombuffer(self.buf, dtype, n, self.pos)
        self.pos += n * size
        return (a != 0).tolist() if etype == BOOL else a.tolist()

    def strings(self, n: int, key: str) -> list[str]:
        """n length-prefixed strings; one pass, each length checked first."""
        buf, pos, end, unpack = self.buf, self.pos, self.end, _U64.unpack_from
        out: list[str] = []
        append = out.append
        for i in range(n):
            if end - pos < 8:
                self.pos = pos
                self.need(8, f"the length of {key!r}[{i}]")
            (k,) = unpack(buf, pos)
            pos += 8
            if k > end - pos:
                self.pos = pos
                self.need(k, f"{key!r}[{i}] ({k} bytes)")
            append(buf[pos:pos + k].decode("utf-8", "replace"))
            pos += k
        self.pos = pos
        return out


# ---------------------------------------------------------------- the file

class GGUFFile:
    """A GGUF file opened read-only: ``metadata`` (dict) and ``tensors`` (list).

    ``metadata`` holds every key with its typed value (arrays as lists);
    ``value_types`` the GGUF type of each ("uint32", "array[string]", ...).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"model file not found: {self.path}")
        fh = open(self.path, "rb")
        try:
            self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError as e:      # an empty file cannot be mapped
            fh.close()
            raise GGUFError(f"{self.path}: not a GGUF file ({e})") from e
        self._fh = fh                # kept open: fstat sees the mapped file, not the path's
        self._stamp = self._stat()
        self.metadata: dict[str, Any] = {}
        self.value_types: dict[str, str] = {}
        self.tensors: list[TensorInfo] = []
        self._by_name: dict[str, TensorInfo] = {}
        cur = _Cursor(self._map, self.path)
        self.version, n_tensors, n_kv = self._header(cur)
        self._read_metadata(cur, n_kv)
        self.alignment = self._alignment()
        self._read_tensors(cur, n_tensors)
        self._by_name = {t.name: t for t in self.tensors}

    def _header(self, cur: _Cursor) -> tuple[int, int, int]:
        cur.need(4, "the magic number")
        magic = cur.buf[0:4]
        if magic != b"GGUF":
            raise cur.fail(f"not a GGUF file (it starts with {magic!r}, not b'GGUF')")
        cur.pos = 4
        version = cur.u32("the version")
        if version & 0xFFFF == 0 and version:
            raise cur.fail(f"version field {version:#x}: a big-endian GGUF file, not supported")
        if version not in (2, 3):
            raise cur.fail(f"GGUF version {version} is not supported (2 and 3 are)")
        n_tensors = cur.u64("the tensor count")
        n_kv = cur.u64("the metadata count")
        # the smallest tensor info is 32 bytes, the smallest key-value pair 13
        cur.need(32 * n_tensors + 13 * n_kv, f"{n_tensors} tensor infos and {n_kv} metadata "
                 "pairs")
        return version, n_tensors, n_kv

    def _read_metadata(self, cur: _Cursor, n_kv: int) -> None:
        meta, types = self.metadata, self.value_types
        for i in range(n_kv):
            key = cur.name(f"metadata key {i}")
            if key in meta:
                raise cur.fail(f"metadata key {key!r} appears twice")
            vtype = cur.u32(f"the type of {key!r}")
            pos = cur.pos
            meta[key] = cur.value(vtype, key)
            if vtype == ARRAY:
                (etype,) = _U32.unpack_from(cur.buf, pos)
                types[key] = f"array[{VALUE_TYPE_NAMES[etype]}]"
            else:
                types[key] = VALUE_TYPE_NAMES[vtype]

    def _alignment(self) -> int:
        key = "general.alignment"
        if key not in self.metadata:
            return DEFAULT_ALIGNMENT
        a = self.metadata[key]
        if self.value_types[key] != VALUE_TYPE_NAMES[UINT32]:
            raise GGUFError(f"{self.path}: metadata key {key!r} must be a uint32, "
                            f"not {self.value_types[key]}")
        if a == 0 or a & (a - 1):
            raise GGUFError(f"{self.path}: metadata key {key!r} = {a} is not a power of 2")
        return a

    def _read_tensors(self, cur: _Cursor, n_tensors: int) -> None:
        infos, seen = [], set()
        for i in range(n_tensors):
            name = cur.name(f"the name of tensor {i}")
            if name in seen:
                raise cur.fail(f"tensor name {name!r} appears twice")
            seen.add(name)
            n_dims = cur.u32(f"the dimension count of tensor {name!r}")
            if not 1 <= n_dims <= MAX_DIMS:
                raise cur.fail(f"tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS} "
                               "allowed)")
            shape = tuple(cur.u64(f"dimension {d} of tensor {name!r}") for d in range(n_dims))
            tid = cur.u32(f"the type of tensor {name!r}")
            offset = cur.u64(f"the offset of tensor {name!r}")
            infos.append((name, shape, tid, offset, self._nbytes(name, shape, tid)))
        data_start = -(-cur.pos // self.alignment) * self.alignment
        size = len(self._map)
        expect, prev = 0, None
        for name, shape, tid, offset, nbytes in infos:
            where = f"tensor {name!r} ({nbytes} bytes at data offset {offset})"
            if data_start + offset + nbytes > size:
                raise cur.fail(f"{where} lies past the end of the file ({size} bytes, data from "
                               f"{data_start}): truncated, or a corrupt offset, shape or type")
            if offset % self.alignment:
                raise cur.fail(f"{where} is not aligned to {self.alignment} bytes")
            if offset != expect:
                after = f"after {prev[0]!r} ({prev[1]} bytes by its shape and type)" if prev \
                    else "as the first tensor"
                raise cur.fail(f"{where} should start at data offset {expect} {after}: tensors "
                               "must be stored in order, without overlaps or gaps")
            expect += -(-nbytes // self.alignment) * self.alignment
            prev = (name, nbytes)
            self.tensors.append(TensorInfo(
                name, tid, shape, np.frombuffer(self._map, np.uint8, nbytes, data_start + offset),
                nbytes, data_start + offset))

    def _nbytes(self, name: str, shape: tuple[int, ...], tid: int) -> int:
        if tid not in TENSOR_TYPES:
            raise GGUFError(f"{self.path}: tensor {name!r} has unknown ggml type id {tid}")
        tname, block, tsize = TENSOR_TYPES[tid]
        n = 1
        for d in shape:
            if d == 0 or d >= 1 << 63:
                raise GGUFError(f"{self.path}: tensor {name!r} has shape {list(shape)}: "
                                "dimensions must be in [1, 2^63)")
            n *= d
        if n >= 1 << 63:
            raise GGUFError(f"{self.path}: tensor {name!r} has shape {list(shape)}, "
                            "over 2^63 elements")
        if shape[0] % block:
            raise GGUFError(f"{self.path}: tensor {name!r} has {shape[0]} elements per row, "
                            f"not a multiple of {tname}'s block of {block}")
        return n // block * tsize

    # ------------------------------------------------------------ access

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def tensor(self, name: str) -> TensorInfo | None:
        return self._by_name.get(name)

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def arch_key(self, suffix: str, default: Any = None) -> Any:
        """``{arch}.{suffix}``, e.g. arch_key("block_count")."""
        return self.metadata.get(f"{self.architecture}.{suffix}", default)

    @property
    def string_metadata(self) -> dict[str, str]:
        """The metadata as llama-cpp-python's ``Llama.metadata`` gives it."""
        return string_metadata(self.metadata, self.value_types)

    def _stat(self) -> tuple[int, int]:
        st = os.fstat(self._fh.fileno())
        return st.st_size, st.st_mtime_ns

    def check_unchanged(self) -> None:
        """ModelFileChangedError if the mapped file was truncated or rewritten."""
        fh = getattr(self, "_fh", None)
        if fh is None or fh.closed:
            return
        now = self._stat()
        if now != self._stamp:
            what = (f"its size went from {self._stamp[0]:,} to {now[0]:,} bytes"
                    if now[0] != self._stamp[0] else "it was modified in place")
            raise ModelFileChangedError(f"the model file {self.path} changed on disk since it was "
                                        f"loaded ({what}); load it again")

    def close(self) -> None:
        # the map itself closes once the last view into it is gone
        self.tensors, self._by_name = [], {}
        self._map = None
        fh = getattr(self, "_fh", None)
        if fh is not None:
            fh.close()


def string_metadata(metadata: dict[str, Any], value_types: dict[str, str]) -> dict[str, str]:
    """Every key but the arrays, its value as text as llama.cpp prints it
    (integers in decimal, floats with six decimals, bools as true / false)."""
    out: dict[str, str] = {}
    for key, v in metadata.items():
        t = value_types.get(key, "")
        if t.startswith("array") or isinstance(v, list):
            continue
        if isinstance(v, bool):
            out[key] = "true" if v else "false"
        elif isinstance(v, float) or t in {VALUE_TYPE_NAMES[f] for f in FLOAT_TYPES}:
            out[key] = f"{float(v):f}"
        else:
            out[key] = str(v)
    return out
