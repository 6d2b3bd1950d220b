"""Bad input to the engine: each gets a clear exception naming the problem,
and the process, the model and other contexts keep working."""
from __future__ import annotations

import re

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader, GGUFWriter

from pyllamakv import errors
from pyllamakv.core.ffi import CDEF, declared_functions, lib
from pyllamakv.core.native import Context, Model
from pyllamakv.gguf.reader import GGUFError
from fixtures.tiny_models import write_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("m") / "tiny.gguf", "llama", T.Q8_0)


@pytest.fixture(scope="module")
def model(tiny):
    with Model(tiny) as m:
        yield m


def _still_works(model):
    c = Context(model, n_ctx=32, n_threads=1)
    c.decode([1, 2, 3])
    assert np.isfinite(c.logits()).all()


def test_every_declared_symbol_resolves():
    names = declared_functions(CDEF)
    assert len(names) > 20
    for name in names:
        assert getattr(lib, name) is not None, name


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        Model(tmp_path / "nope.gguf")


def test_truncated_file(tiny, tmp_path, model):
    data = tiny.read_bytes()
    bad = tmp_path / "truncated.gguf"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises((GGUFError, errors.ShapeError), match="truncated|bytes|GGUF"):
        Model(bad)
    _still_works(model)


def _rewrite(src, dst, *, arch=None, drop=None, retype=None, reshape=None):
    """Copy a GGUF file, changing the architecture or one tensor."""
    r = GGUFReader(src)
    a = arch or r.fields["general.architecture"].contents()
    w = GGUFWriter(str(dst), a)
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        key = k.replace("llama.", f"{a}.") if arch else k
        w.add_key_value(key, f.contents(), f.types[0], f.types[-1] if len(f.types) > 1 else None)
    for t in r.tensors:
        if t.name == drop:
            continue
        data = np.array(t.data)
        if t.name == reshape:
            w.add_tensor(t.name, np.random.default_rng().standard_normal((3, 64)).astype(np.float32))
        elif t.name == retype:
            rows = int(t.shape[1])  # TQ2_0: 66 bytes per 256 values, a type the engine lacks
            raw = np.random.default_rng().integers(0, 256, (rows, int(t.shape[0]) // 256 * 66))
            w.add_tensor(t.name, raw.astype(np.uint8), raw_dtype=T.TQ2_0)
        else:
            w.add_tensor(t.name, data, raw_dtype=t.tensor_type if t.tensor_type not in (T.F32, T.F16) else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def test_unknown_architecture(tiny, tmp_path, model):
    bad = _rewrite(tiny, tmp_path / "arch.gguf", arch="mamba")
    with pytest.raises(GGUFError, match="unsupported architecture 'mamba'"):
        Model(bad)
    _still_works(model)


def test_missing_tensor(tiny, tmp_path, model):
    bad = _rewrite(tiny, tmp_path / "miss.gguf", drop="blk.1.ffn_up.weight")
    with pytest.raises(errors.ShapeError, match="missing tensor 'blk.1.ffn_up.weight'"):
        Model(bad)
    _still_works(model)


def test_wrong_tensor_shape(tiny, tmp_path, model):
    bad = _rewrite(tiny, tmp_path / "shape.gguf", reshape="blk.0.attn_k.weight")
    with pytest.raises(errors.ShapeError, match=r"'blk.0.attn_k.weight' has shape \[64, 3\]"):
        Model(bad)
    _still_works(model)


def test_unsupported_tensor_type(tiny, tmp_path, model):
    bad = _rewrite(tiny, tmp_path / "type.gguf", retype="blk.0.attn_q.weight")
    with pytest.raises(errors.UnsupportedError, match="blk.0.attn_q.weight.*not a supported weight type"):
        Model(bad)
    _still_works(model)


def test_too_many_tokens(model):
    c = Context(model, n_ctx=16, n_batch=16, n_threads=1)
    c.decode(list(range(10)))
    with pytest.raises(errors.ContextFullError, match="exceed n_ctx = 16"):
        c.decode(list(range(10)))
    assert c.n_tokens == 10          # the cache is as it was
    c.decode([1])
    with pytest.raises(errors.InvalidArgumentError, match="exceed n_batch"):
        c.decode(list(range(17)))
    with pytest.raises(errors.InvalidArgumentError, match="outside the vocabulary"):
        c.decode([100000])
    with pytest.raises(errors.InvalidArgumentError, match="does not follow the cache"):
        c.decode([1], pos0=3)
    c.decode([2])
    assert c.n_tokens == 12


@pytest.mark.parametrize("kw,match", [
    (dict(n_ctx=0), "n_ctx must be > 0"),
    (dict(n_ubatch=-1), "n_ubatch"),
    (dict(kv_chunk=5000), "kv_chunk"),
    (dict(type_k="q4_K"), "not a supported KV cache type"),
    (dict(type_v="zz"), "unknown element type"),
    (dict(n_threads=-3), "n_threads"),
    (dict(gpu_kernels="turbo"), "gpu_kernels"),
])
def test_invalid_params(model, kw, match):
    with pytest.raises((ValueError, TypeError), match=match):
        Context(model, **kw)
    _still_works(model)


def test_gpu_kernels_checked_by_the_core(model):
    """The core refuses a gpu_kernels value other than 0 / 1 itself (not only
    the Python layer), and the model stays usable."""
    from pyllamakv.core.ffi import ffi, lib
    p = ffi.new("lkv_context_params *")
    lib.lkv_context_params_init(p)
    assert p.gpu_kernels == 1   # the fast kernels by default
    p.n_ctx = 64
    p.gpu_kernels = 2
    out = ffi.new("lkv_context **")
    assert lib.lkv_context_create(model.ptr, p, out) != 0
    assert "gpu_kernels" in ffi.string(lib.lkv_last_error()).decode()
    _still_works(model)


def test_truncate_beyond_length(model):
    c = Context(model, n_ctx=16, n_threads=1)
    c.decode([1, 2])
    with pytest.raises(errors.InvalidArgumentError, match="cannot truncate to 5"):
        c.truncate(5)


def test_bad_state_blob(model):
    c = Context(model, n_ctx=16, n_threads=1)
    c.decode([1, 2])
    blob = bytearray(c.state_get())
    with pytest.raises(errors.InvalidArgumentError, match="does not match|bytes"):
        c.state_set(bytes(blob[:-3]))
    blob[0] ^= 0xFF
    with pytest.raises(errors.InvalidArgumentError, match="does not match"):
        c.state_set(bytes(blob))
    assert c.n_tokens == 2


def test_closed_handles_raise(tiny):
    m = Model(tiny)
    c = Context(m, n_ctx=16, n_threads=1)
    m.close()                       # closes its contexts first
    with pytest.raises(ValueError, match="closed"):
        c.decode([1])
    m.close()                       # idempotent


def test_error_message_is_per_thread():
    assert re.search("unsupported element type id 99",
                     _fail_type_info(99)) is not None


def _fail_type_info(tid):
    from pyllamakv.core.ffi import ffi, last_error
    info = ffi.new("lkv_type_info *")
    assert lib.lkv_type_info_get(tid, info) != 0
    return last_error()
