"""The GGUF reader on good and crafted files: the same values as gguf-py on
good ones; on bad ones a GGUFError naming the key or tensor, at once (every
count and length is checked against the bytes left before it is used)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType as V
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES

import pyllamakv
from pyllamakv.gguf.reader import GGUFError, GGUFFile
from pyllamakv.gguf.types import TENSOR_TYPES
from fixtures import gguf_craft as gc
from fixtures.tiny_models import write_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return gc.write_tiny_spm_llama(tmp_path_factory.mktemp("reader"))


def spec_of(path) -> gc.Spec:
    return gc.read_spec(path)


def patched(spec: gc.Spec, path, kind: str, label: str, value: int, nth: int = 0):
    """spec serialized, with the nth field (kind, label) overwritten by value."""
    fields = gc.Fields()
    raw = bytearray(gc.serialize(spec, fields))
    rows = [r for r in fields.rows if r[0] == kind and r[1] == label]
    _, _, off, size = rows[nth]
    raw[off:off + size] = value.to_bytes(size, "little")
    path.write_bytes(bytes(raw))
    return path


def expect_error(path, *words):
    with pytest.raises(GGUFError) as e:
        GGUFFile(path)
    for w in words:
        assert w in str(e.value), (w, str(e.value))
    return str(e.value)


def _old_value(field):
    """gguf-py's value of one field (the reference)."""
    if field.types[0] == V.ARRAY and field.types[-1] == V.STRING:
        return [bytes(field.parts[i]).decode("utf-8", "replace") for i in field.data]
    v = field.contents()
    return v


# ---------------------------------------------------------------- good files

@pytest.mark.parametrize("arch,wtype", [("llama", T.Q8_0), ("qwen2", T.Q4_K), ("qwen3", T.F16)])
def test_same_as_gguf_py(tmp_path, arch, wtype):
    spec = gc.read_spec(write_tiny_model(tmp_path / "m0.gguf", arch, wtype))
    gc.add_spm_vocab(spec, 320, seed=3)
    spec.set("test.bools", V.ARRAY, [True, False, True], V.BOOL)
    spec.set("test.i8", V.INT8, -5)
    spec.set("test.f64", V.FLOAT64, 0.1)
    spec.set("test.u64", V.UINT64, 2**63 + 7)
    spec.set("test.text", V.STRING, "h\u00e9llo \U0001F600")
    path = gc.write(spec, tmp_path / "m.gguf")
    r, f = GGUFReader(path), GGUFFile(path)
    ref = {k: _old_value(v) for k, v in r.fields.items() if not k.startswith("GGUF.")}
    assert f.metadata == ref
    assert f.value_types["test.bools"] == "array[bool]" and f.value_types["test.i8"] == "int8"
    assert len(f.tensors) == len(r.tensors)
    for a, b in zip(r.tensors, f.tensors):
        assert (a.name, int(a.tensor_type), tuple(int(x) for x in a.shape), int(a.n_bytes)) == \
            (b.name, b.type, b.shape, b.nbytes)
        assert np.array_equal(a.data.view(np.uint8).reshape(-1), b.data)


def test_type_table_matches_gguf_py():
    for t, (block, size) in GGML_QUANT_SIZES.items():
        assert TENSOR_TYPES[int(t)][1:] == (block, size), t.name
        assert TENSOR_TYPES[int(t)][0] == t.name


def test_long_vocab_entry_is_linear(tiny, tmp_path):
    """A 300k-character token: read and turned into a tokenizer in bounded time
    (a hang guard: milliseconds here, 46 s when the SPM merges were quadratic)."""
    from pyllamakv.text.tokenizer import Tokenizer
    spec = spec_of(tiny)
    spec.kv("tokenizer.ggml.tokens")[2][300] = "ab" * 150_000
    path = gc.write(spec, tmp_path / "long.gguf")
    t0 = time.perf_counter()
    f = GGUFFile(path)
    tok = Tokenizer.from_metadata(f.metadata)
    assert time.perf_counter() - t0 < 10
    assert len(f.metadata["tokenizer.ggml.tokens"][300]) == 300_000
    assert tok.token_text(300) == "ab" * 150_000


# ---------------------------------------------------------------- counts and lengths

def _load_in_subprocess(path) -> subprocess.CompletedProcess:
    """GGUFFile(path) in a child with a time bound (the old reader never returned)."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(pyllamakv.__file__)))
    code = ("import sys; from pyllamakv.gguf.reader import GGUFFile, GGUFError\n"
            "try: GGUFFile(sys.argv[1])\n"
            "except GGUFError as e: print('GGUFError:', e); sys.exit(3)\n")
    return subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, timeout=60, env=env)


@pytest.mark.parametrize("etype", [V.UINT8, V.INT32, V.STRING])
def test_huge_array_count_fails_at_once(tiny, tmp_path, etype):
    spec = spec_of(tiny)
    spec.set("evil.array", V.ARRAY, [1, 2, 3] if etype != V.STRING else ["a", "b"], etype)
    bad = patched(spec, tmp_path / "huge.gguf", "count", "evil.array", 1 << 40)
    assert bad.stat().st_size < 2 << 20
    p = _load_in_subprocess(bad)
    assert p.returncode == 3, p.stderr
    assert "evil.array" in p.stdout and str(1 << 40) in p.stdout


def test_huge_string_length(tiny, tmp_path):
    spec = spec_of(tiny)
    spec.set("evil.text", V.STRING, "abc")
    expect_error(patched(spec, tmp_path / "s.gguf", "length", "evil.text", (1 << 64) - 1),
                 "evil.text", "truncated or corrupt")
    spec.drop("evil.text")
    expect_error(patched(spec, tmp_path / "t.gguf", "length", "tokenizer.ggml.tokens[2]",
                         1 << 62), "tokenizer.ggml.tokens", "[2]")


@pytest.mark.parametrize("nth,value", [(0, 1 << 50), (1, 1 << 60), (0, (1 << 64) - 1)])
def test_huge_header_counts(tiny, tmp_path, nth, value):
    expect_error(patched(spec_of(tiny), tmp_path / "h.gguf", "count", "header", value, nth),
                 str(value))


@pytest.mark.parametrize("version,words", [(1, "version 1"), (4, "version 4"),
                                           (0x03000000, "big-endian")])
def test_versions(tiny, tmp_path, version, words):
    expect_error(patched(spec_of(tiny), tmp_path / "v.gguf", "version", "header", version), words)


def test_not_gguf_empty_and_truncated(tiny, tmp_path):
    data = tiny.read_bytes()
    for name, raw, word in [("magic", b"GGML" + data[4:], "not a GGUF"), ("empty", b"", "GGUF"),
                            ("short", data[:20], "truncated"),
                            ("half", data[:len(data) // 2], "past the end")]:
        (tmp_path / name).write_bytes(raw)
        expect_error(tmp_path / name, word)


def test_value_types(tiny, tmp_path):
    spec = spec_of(tiny)
    spec.set("evil.nested", V.ARRAY, [1], V.UINT8)
    expect_error(patched(spec, tmp_path / "n.gguf", "type", "evil.nested[]", V.ARRAY),
                 "evil.nested", "nested")
    expect_error(patched(spec, tmp_path / "u.gguf", "type", "evil.nested", 13),
                 "evil.nested", "unknown value type 13")
    spec.kvs.append(list(spec.kv("general.architecture")))
    expect_error(gc.write(spec, tmp_path / "d.gguf"), "general.architecture", "twice")


@pytest.mark.parametrize("vtype,value,word", [(V.UINT32, 48, "power of 2"),
                                              (V.UINT32, 0, "power of 2"),
                                              (V.STRING, "32", "uint32")])
def test_alignment_key(tiny, tmp_path, vtype, value, word):
    spec = spec_of(tiny)
    spec.set("general.alignment", vtype, value)
    expect_error(gc.write(spec, tmp_path / "a.gguf"), "general.alignment", word)


def test_alignment_honoured(tmp_path):
    """A file written with 64-byte alignment reads the same tensors."""
    src = write_tiny_model(tmp_path / "a32.gguf", "llama", T.Q8_0)
    spec = gc.read_spec(src)
    spec.set("general.alignment", V.UINT32, 64)
    data = b""
    for t in spec.tensors:
        n = GGUFFile(src).tensor(t[0]).nbytes
        chunk = spec.data[t[3]:t[3] + n]
        data += b"\0" * (-len(data) % 64)
        t[3] = len(data)
        data += chunk
    spec.data, spec.alignment = data, 64
    f, g = GGUFFile(gc.write(spec, tmp_path / "a64.gguf")), GGUFFile(src)
    assert f.alignment == 64
    assert all(np.array_equal(a.data, b.data) for a, b in zip(f.tensors, g.tensors))
    assert all(t.offset % 64 == 0 for t in f.tensors)


# ---------------------------------------------------------------- tensor infos

NAME = "blk.0.attn_q.weight"


def test_offset_that_wraps(tiny, tmp_path):
    msg = expect_error(patched(spec_of(tiny), tmp_path / "w.gguf", "offset", NAME,
                               (1 << 64) - 64), NAME, "past the end")
    assert str((1 << 64) - 64) in msg


@pytest.mark.parametrize("change,words", [
    (lambda t: t.__setitem__(2, int(T.F32)), ("should start at", "after")),  # F32 over Q8_0
    (lambda t: t.__setitem__(2, int(T.Q4_0)), ("should start at", "after")),  # smaller type
    (lambda t: t.__setitem__(2, 4), ("unknown ggml type id 4",)),
    (lambda t: t.__setitem__(2, 99), ("unknown ggml type id 99",)),
    (lambda t: t.__setitem__(3, t[3] + 32), ("should start at",)),
    (lambda t: t.__setitem__(3, t[3] + 3), ("not aligned",)),
    (lambda t: t.__setitem__(1, (t[1][0], t[1][1], 1, 1, 1)), ("5 dimensions",)),
    (lambda t: t.__setitem__(1, (t[1][0], 0)), ("dimensions must be",)),
    (lambda t: t.__setitem__(1, (t[1][0] - 16, t[1][1])), ("not a multiple of Q8_0",)),
    (lambda t: t.__setitem__(1, (t[1][0], 1 << 40, 1 << 30)), ("over 2^63",)),
])
def test_bad_tensor_info(tiny, tmp_path, change, words):
    spec = spec_of(tiny)
    change(spec.tensor(NAME))
    expect_error(gc.write(spec, tmp_path / "t.gguf"), NAME, *words)


def test_last_tensor_retyped_lies_past_the_end(tiny, tmp_path):
    spec = spec_of(tiny)
    spec.tensors[-1][2] = int(T.F32)
    expect_error(gc.write(spec, tmp_path / "l.gguf"), spec.tensors[-1][0], "past the end")


def test_duplicate_and_bad_tensor_names(tiny, tmp_path):
    spec = spec_of(tiny)
    spec.tensor("blk.0.attn_k.weight")[0] = NAME
    expect_error(gc.write(spec, tmp_path / "d.gguf"), NAME, "twice")
    spec = spec_of(tiny)
    spec.tensor(NAME)[0] = b"blk.\xff".decode("latin-1")
    raw = gc.serialize(spec).replace("blk.\xff".encode(), b"blk\xff\xfe", 1)
    (tmp_path / "u.gguf").write_bytes(raw)
    expect_error(tmp_path / "u.gguf", "not UTF-8")


def test_ndims_count_huge(tiny, tmp_path):
    expect_error(patched(spec_of(tiny), tmp_path / "n.gguf", "ndims", NAME, 1 << 31),
                 NAME, "2147483648 dimensions")
