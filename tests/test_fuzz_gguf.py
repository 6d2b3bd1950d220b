"""Fuzzing the load of a tiny model: hypothesis overwrites the counts, lengths,
type ids, offsets, dimensions and values of its header, metadata and tensor
infos (and truncates or flips bytes). Every outcome must be a load that runs
or one of the project's exceptions, within a deadline per example, and after
every example the good model gives the logits it gave before."""
from __future__ import annotations

import copy
import os
import tempfile
from datetime import timedelta

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFValueType as V
from gguf.constants import GGML_QUANT_SIZES
from hypothesis import HealthCheck, given, settings, strategies as st

from pyllamakv import errors
from pyllamakv.core.native import Context, Model
from pyllamakv.gguf.reader import GGUFError, GGUFFile
from pyllamakv.text.tokenizer import Tokenizer
from fixtures import gguf_craft as gc
from fixtures.tiny_models import write_tiny_model

PROJECT_ERRORS = (GGUFError, errors.LlamaKVError)
TOKENS = [1, 40, 7, 300]
_DIR = tempfile.mkdtemp(prefix="fuzz_gguf_")


def _base_spec() -> gc.Spec:
    spec = gc.read_spec(write_tiny_model(os.path.join(_DIR, "plain.gguf"), "llama", T.Q8_0,
                                         n_vocab=320, n_embd=64, n_layer=1, n_head=2,
                                         n_head_kv=1, n_ff=64, seed=7))
    gc.add_spm_vocab(spec, 320, seed=7)
    return spec


SPEC = _base_spec()
_FIELDS = gc.Fields()
RAW = gc.serialize(SPEC, _FIELDS)
ROWS = _FIELDS.rows
GOOD = os.path.join(_DIR, "good.gguf")
with open(GOOD, "wb") as fh:
    fh.write(RAW)


def _run(path: str) -> np.ndarray:
    """Load, tokenize and decode a few tokens; the last logits."""
    f = GGUFFile(path)
    m = Model(f, n_threads=1)
    try:
        if "tokenizer.ggml.tokens" in f.metadata:
            tok = Tokenizer.from_metadata(f.metadata)
            tok.decode(tok.encode("a bad cab", add_bos=True))
        with Context(m, n_ctx=8, n_batch=8, n_ubatch=8, n_threads=1) as c:
            c.decode(TOKENS)
            return c.logits()
    finally:
        m.close()



def _interesting(size: int) -> st.SearchStrategy[int]:
    top = (1 << (8 * size)) - 1
    special = [0, 1, 2, 3, 4, 5, 6, 8, 9, 12, 13, 31, 32, 33, 63, 64, 255, 256, 2**31 - 1,
               2**31, 2**32 - 1, 2**40, 2**62, 2**63, top, top - 31]
    return st.one_of(st.sampled_from([v for v in special if v <= top]), st.integers(0, top))


# ---------------------------------------------------------------- structural changes

_VALUES = st.one_of(
    st.tuples(st.just(V.UINT32), st.one_of(st.integers(0, 600), st.integers(0, 2**32 - 1))),
    st.tuples(st.just(V.INT32), st.integers(-2**31, 2**31 - 1)),
    st.tuples(st.just(V.UINT64), st.integers(0, 2**64 - 1)),
    st.tuples(st.just(V.FLOAT32), st.floats(width=32)),
    st.tuples(st.just(V.FLOAT64), st.floats()),
    st.tuples(st.just(V.BOOL), st.booleans()),
    st.tuples(st.just(V.STRING), st.text(max_size=12)),
    st.tuples(st.just(V.ARRAY), st.lists(st.integers(0, 600), max_size=4)))
_DIMS = st.sampled_from([0, 1, 2, 16, 32, 64, 96, 128, 256, 320, 512, 2**32, 2**62])


@st.composite
def changes(draw):
    """Edits of the file's structure: a value and its type, a tensor's type or
    shape, a dropped key or tensor; the data is then laid out again to fit."""
    ops = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["kv", "kv", "ttype", "shape", "drop_kv", "drop_tensor"]))
        if kind == "kv":
            ops.append(("kv", draw(st.integers(0, len(SPEC.kvs) - 1)), *draw(_VALUES)))
        elif kind == "ttype":
            ops.append(("ttype", draw(st.integers(0, len(SPEC.tensors) - 1)),
                        draw(st.integers(0, 45))))
        elif kind == "shape":
            ops.append(("shape", draw(st.integers(0, len(SPEC.tensors) - 1)),
                        tuple(draw(st.lists(_DIMS, min_size=1, max_size=5)))))
        else:
            n = len(SPEC.kvs) if kind == "drop_kv" else len(SPEC.tensors)
            ops.append((kind, draw(st.integers(0, n - 1))))
    return ops


def _nbytes(shape, tid) -> int | None:
    if tid not in GGML_QUANT_SIZES or not 1 <= len(shape) <= 4 or 0 in shape:
        return None
    block, size = GGML_QUANT_SIZES[tid]
    n = int(np.prod(shape, dtype=object))
    return None if shape[0] % block or n // block * size > 1 << 22 else n // block * size


def _rebuild(ops) -> bytes:
    spec = copy.deepcopy(SPEC)
    old = [(t[3], (_nbytes(t[1], t[2]))) for t in spec.tensors]
    chunks = {t[0]: spec.data[o:o + n] for t, (o, n) in zip(spec.tensors, old)}
    for op in ops:
        if op[0] == "kv":
            kv = spec.kvs[op[1]]
            kv[1:] = [op[2], op[3], V.UINT32 if op[2] == V.ARRAY else None]
        elif op[0] == "ttype":
            spec.tensors[op[1]][2] = op[2]
        elif op[0] == "shape":
            spec.tensors[op[1]][1] = op[2]
    drop_kv = {op[1] for op in ops if op[0] == "drop_kv"}
    drop_t = {op[1] for op in ops if op[0] == "drop_tensor"}
    spec.kvs = [kv for i, kv in enumerate(spec.kvs) if i not in drop_kv]
    spec.tensors = [t for i, t in enumerate(spec.tensors) if i not in drop_t]
    data = b""
    for t in spec.tensors:             # packed in order again, each cut or zero-padded
        chunk = chunks[t[0]]
        n = _nbytes(t[1], t[2])
        n = len(chunk) if n is None else n
        data += b"\0" * (-len(data) % spec.alignment)
        t[3] = len(data)
        data += chunk[:n] + b"\0" * (n - len(chunk))
    spec.data = data
    return gc.serialize(spec)


# ---------------------------------------------------------------- byte-level changes

@st.composite
def mutations(draw):
    ops = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["field", "field", "field", "delta", "truncate", "byte"]))
        if kind in ("field", "delta"):
            i = draw(st.integers(0, len(ROWS) - 1))
            size = ROWS[i][3]
            if kind == "field":
                v = draw(_interesting(size))
            else:
                old = int.from_bytes(RAW[ROWS[i][2]:ROWS[i][2] + size], "little")
                v = (old + draw(st.integers(-70, 70))) % (1 << (8 * size))
            ops.append(("field", i, v))
        elif kind == "truncate":
            ops.append(("truncate", draw(st.integers(0, len(RAW) - 1))))
        else:
            ops.append(("byte", draw(st.integers(0, len(RAW) - 1)), draw(st.integers(0, 255))))
    return ops


def _apply(ops) -> bytes:
    raw = bytearray(RAW)
    for op in ops:
        if op[0] == "field":
            _, _, off, size = ROWS[op[1]]
            raw[off:off + size] = op[2].to_bytes(size, "little")
        elif op[0] == "byte":
            raw[op[1]] = op[2]
    for op in ops:
        if op[0] == "truncate":
            del raw[op[1]:]
    return bytes(raw)


@pytest.fixture(scope="module")
def reference():
    return _run(GOOD)


def test_fields_cover_every_part():
    kinds = {r[0] for r in ROWS}
    assert {"version", "count", "length", "type", "scalar", "ndims", "dim", "tensor_type",
            "offset"} <= kinds


@settings(max_examples=400, deadline=timedelta(seconds=5), database=None, derandomize=False,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(change=st.one_of(mutations().map(_apply), changes().map(_rebuild)))
def test_mutated_files_load_or_raise(reference, change):
    path = os.path.join(_DIR, "mutant.gguf")
    with open(path, "wb") as fh:
        fh.write(change)
    try:
        _run(path)
    except PROJECT_ERRORS:
        pass
    assert np.array_equal(_run(GOOD), reference)
