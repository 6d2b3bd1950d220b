"""A model's metadata checked at load: hyper-parameters by type and range,
tensor shapes against them, the vocab against the model, NaN / inf weights;
and Llama.metadata in llama-cpp-python's form. Each bad file is refused with
an error naming the key or tensor, and the good model keeps working."""
from __future__ import annotations

import math
import time

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFValueType as V
from gguf import quants

from pyllamakv import Llama, errors
from pyllamakv.core.native import Context, Model
from pyllamakv.gguf.reader import GGUFError, GGUFFile, TensorInfo
from pyllamakv.gguf.types import F16_SCALE_FIELDS, TENSOR_TYPES
from pyllamakv.gguf.hparams import model_params
from pyllamakv.text.tokenizer import Tokenizer
from pyllamakv.gguf.weight_check import check_finite, nonfinite
from fixtures import gguf_craft as gc
from _smollm2 import require_model_path
from fixtures.tiny_models import write_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return gc.write_tiny_spm_llama(tmp_path_factory.mktemp("checks"))


@pytest.fixture(scope="module")
def model(tiny):
    with Model(tiny) as m:
        yield m


@pytest.fixture
def spec(tiny):
    return gc.read_spec(tiny)


def _still_works(model):
    c = Context(model, n_ctx=16, n_threads=1)
    c.decode([1, 5, 9])
    assert np.isfinite(c.logits()).all()


def refused(spec, path, exc, *words):
    """Model(path of spec) raises exc with every word in its message."""
    p = gc.write(spec, path)
    with pytest.raises(exc) as e:
        Model(p)
    for w in words:
        assert w in str(e.value), (w, str(e.value))
    return p


# ---------------------------------------------------------------- hyper-parameters

@pytest.mark.parametrize("vtype,value,found", [
    (V.STRING, "2", "string '2'"), (V.FLOAT32, 2.5, "float32 2.5"), (V.BOOL, True, "bool True"),
    (V.INT32, -2, "out of range [1, 2147483647]"),
    (V.UINT32, 2**31, "= 2147483648 is out of range [1, 2147483647]"),
    (V.UINT64, 2**64 - 1, "out of range"),
])
def test_block_count_type_and_range(spec, tmp_path, model, vtype, value, found):
    spec.set("llama.block_count", vtype, value)
    refused(spec, tmp_path / "b.gguf", GGUFError, "'llama.block_count'", found)
    _still_works(model)


@pytest.mark.parametrize("key,vtype,value,words", [
    ("llama.attention.head_count", V.UINT32, 0, ("head_count'", "out of range [1,")),
    ("llama.attention.head_count_kv", V.UINT32, 3, ("head_count 4 is not a multiple",)),
    ("llama.attention.head_count_kv", V.UINT32, 8, ("head_count_kv'", "[1, 4]")),
    ("llama.attention.head_count", V.UINT32, 6, ("embedding_length 256 is not a multiple",)),
    ("llama.embedding_length", V.UINT64, 2**40, ("embedding_length'", "out of range")),
    ("llama.context_length", V.UINT32, 2**31, ("context_length'", "[0, 2147483647]")),
    ("llama.rope.dimension_count", V.UINT32, 63, ("dimension_count 63 must be even",)),
    ("llama.rope.dimension_count", V.UINT32, 128, ("dimension_count'", "[2, 64]")),
    ("llama.attention.layer_norm_rms_epsilon", V.FLOAT32, -1e-5, ("epsilon'", "out of range")),
    ("llama.attention.layer_norm_rms_epsilon", V.FLOAT32, math.nan, ("epsilon'",)),
    ("llama.attention.layer_norm_rms_epsilon", V.STRING, "1e-5", ("epsilon'", "string")),
    ("llama.rope.freq_base", V.FLOAT64, 1e300, ("freq_base'", "out of range")),
    ("llama.vocab_size", V.UINT32, 300, ("vocab_size' = 300 differs", "320 rows")),
    ("llama.feed_forward_length", V.ARRAY, [512, 512], ("feed_forward_length'", "array")),
    ("llama.attention.value_length", V.UINT32, 32, ("value_length 32 differs",)),
])
def test_bad_hyper_parameters(spec, tmp_path, model, key, vtype, value, words):
    spec.set(key, vtype, value, V.UINT32 if vtype == V.ARRAY else None)
    refused(spec, tmp_path / "h.gguf", GGUFError, *words)
    _still_works(model)


def test_huge_block_count_fails_at_the_first_missing_layer(spec, tmp_path):
    """A hang guard: the layers are checked one by one, not listed first."""
    spec.set("llama.block_count", V.UINT32, 2**31 - 1)
    t0 = time.perf_counter()
    refused(spec, tmp_path / "b.gguf", errors.ShapeError, "missing tensor 'blk.2.attn_norm")
    assert time.perf_counter() - t0 < 10


def test_missing_key(spec, tmp_path):
    spec.drop("llama.feed_forward_length")
    refused(spec, tmp_path / "m.gguf", GGUFError, "'llama.feed_forward_length' is missing")


def test_rope_scaling_factor_checked(spec, tmp_path):
    spec.set("llama.rope.scaling.type", V.STRING, "linear")
    spec.set("llama.rope.scaling.factor", V.FLOAT32, 0.0)
    refused(spec, tmp_path / "r.gguf", GGUFError, "rope.scaling.factor'")
    spec.set("llama.rope.scaling.factor", V.FLOAT32, 4.0)
    assert model_params(GGUFFile(gc.write(spec, tmp_path / "ok.gguf")))["rope_freq_scale"] == 0.25


@pytest.mark.parametrize("name,shape,words", [
    ("blk.1.attn_k.weight", (256, 64), ("'blk.1.attn_k.weight' has shape [256, 64]",
                                        "expected [256, 128]")),
    ("output_norm.weight", (128,), ("'output_norm.weight' has shape [128]",)),
])
def test_tensor_shapes_checked_in_python(spec, tmp_path, model, name, shape, words):
    """model_params refuses the tensor (ShapeError naming it) before the core is called."""
    t = spec.tensor(name)
    t[1] = shape   # data is bigger than the new shape needs: the packing check also fires
    idx = spec.tensors.index(t)
    spec.tensors = spec.tensors[:idx + 1]   # so make it the last tensor
    p = gc.write(spec, tmp_path / "s.gguf")
    f = GGUFFile(p)
    with pytest.raises(errors.ShapeError) as e:
        model_params(f)
    assert all(w in str(e.value) for w in words), str(e.value)
    _still_works(model)


def test_missing_layer_tensor_in_python(spec, tmp_path):
    spec.tensors = [t for t in spec.tensors if t[0] != "blk.1.ffn_up.weight"]
    # keep the packing: drop every tensor after it too
    spec.tensors = spec.tensors[:[t[0] for t in spec.tensors].index("blk.1.ffn_gate.weight") + 1]
    with pytest.raises(errors.ShapeError, match="missing tensor 'blk.1.ffn_up.weight'"):
        model_params(GGUFFile(gc.write(spec, tmp_path / "m.gguf")))


# ---------------------------------------------------------------- vocab against model

def test_short_token_list(spec, tmp_path, model):
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
        spec.kv(key)[2] = spec.kv(key)[2][:300]
    p = refused(spec, tmp_path / "v.gguf", GGUFError, "tokenizer.ggml.tokens has 300 entries",
                "'token_embd.weight' has 320 rows")
    with pytest.raises(GGUFError, match="300 entries"):
        Llama(str(p), n_ctx=16, device="cpu")
    _still_works(model)


@pytest.mark.parametrize("key,n", [("tokenizer.ggml.scores", 319),
                                   ("tokenizer.ggml.token_type", 321)])
def test_vocab_arrays_of_other_lengths(spec, tmp_path, key, n):
    v = spec.kv(key)[2]
    spec.kv(key)[2] = (v + v)[:n]
    p = gc.write(spec, tmp_path / "a.gguf")
    with pytest.raises(GGUFError, match=f"{key} has {n} entries for 320 tokens"):
        Llama(str(p), n_ctx=16, device="cpu")


@pytest.mark.parametrize("text", ["<0xZZ>", "<0x4>", "x", "<0x41>junk"])
def test_malformed_byte_token(spec, tmp_path, text):
    spec.kv("tokenizer.ggml.tokens")[2][3 + 0x41] = text
    f = GGUFFile(gc.write(spec, tmp_path / "b.gguf"))
    with pytest.raises(GGUFError, match=r"tokenizer.ggml.tokens\[68\].*<0xNN>"):
        Tokenizer.from_metadata(f.metadata)


@pytest.mark.parametrize("key,vtype,value,words", [
    ("tokenizer.ggml.bos_token_id", V.UINT32, 320, ("bos_token_id = 320", "[0, 320)")),
    ("tokenizer.ggml.padding_token_id", V.UINT32, 5000, ("padding_token_id = 5000",)),
    ("tokenizer.ggml.eos_token_id", V.STRING, "2", ("eos_token_id = '2'",)),
    ("tokenizer.ggml.add_bos_token", V.STRING, "false", ("add_bos_token must be a bool",)),
    ("tokenizer.ggml.token_type", V.ARRAY, ["1"] * 320, ("token_type must be an array of",)),
    ("tokenizer.ggml.scores", V.ARRAY, [1.0] * 319 + [math.inf], ("scores must be", "finite")),
])
def test_bad_vocab_keys(spec, tmp_path, key, vtype, value, words):
    etype = None if vtype != V.ARRAY else V.STRING if isinstance(value[0], str) else V.FLOAT32
    spec.set(key, vtype, value, etype)
    p = gc.write(spec, tmp_path / "k.gguf")
    with pytest.raises(GGUFError) as e:
        Llama(str(p), n_ctx=16, device="cpu")
    assert all(w in str(e.value) for w in words), str(e.value)


# ---------------------------------------------------------------- finite weights

def _poison(spec, name, nbytes, pos_bytes):
    raw = spec.tensor_bytes(name, nbytes)
    raw[pos_bytes[0]:pos_bytes[0] + len(pos_bytes[1])] = np.frombuffer(pos_bytes[1], np.uint8)
    spec.put_bytes(name, raw)


@pytest.mark.parametrize("name,nbytes,at,bad,kind", [
    ("blk.1.ffn_norm.weight", 256 * 4, 4 * 77, np.float32(np.nan).tobytes(), "F32"),
    ("blk.0.attn_v.weight", 34 * 8, 34 * 5, np.float16(np.inf).tobytes(), "Q8_0"),
    ("token_embd.weight", 34 * 8, 34 * 7, np.float16(np.nan).tobytes(), "Q8_0"),
])
def test_nonfinite_weights_refused_at_load(spec, tmp_path, model, name, nbytes, at, bad, kind):
    _poison(spec, name, nbytes, (at, bad))
    refused(spec, tmp_path / "n.gguf", GGUFError, f"'{name}' ({kind})", "NaN or infinite")
    _still_works(model)


def test_nonfinite_f16_matrix(tmp_path):
    spec = gc.read_spec(write_tiny_model(tmp_path / "f16.gguf", "qwen3", T.F16))
    rng = np.random.default_rng()
    at = 2 * int(rng.integers(0, 512 * 256))
    _poison(spec, "blk.1.ffn_up.weight", 512 * 256 * 2, (at, np.float16(-np.inf).tobytes()))
    refused(spec, tmp_path / "n.gguf", GGUFError, "'blk.1.ffn_up.weight' (F16)")
    f = GGUFFile(tmp_path / "n.gguf")
    check_finite(f, budget=0)       # matrices past the budget are not examined
    check_finite(f, types={0})      # nor tensors of other types than those asked for


@pytest.mark.parametrize("tid,dtype", [(0, np.float32), (1, np.float16), (30, None)])
def test_nonfinite_matches_numpy(tid, dtype):
    rng = np.random.default_rng()
    for trial in range(20):
        x = rng.standard_normal(int(rng.integers(1, 5000))).astype(np.float32)
        if trial % 2:
            x[rng.integers(0, len(x), int(rng.integers(1, 3)))] = rng.choice([np.nan, np.inf,
                                                                              -np.inf])
        raw = (x.astype(dtype) if dtype else (x.view(np.uint32) >> 16).astype(np.uint16))
        t = TensorInfo("x", tid, (len(x),), raw.view(np.uint8), raw.nbytes)
        assert nonfinite(t) == (not np.isfinite(x).all())


@pytest.mark.parametrize("tid", sorted(F16_SCALE_FIELDS))
def test_scale_fields_match_the_dequantizer(tid):
    """Each listed scale field is where gguf-py's dequantizer reads a scale:
    finite there gives finite weights; inf at any one of them does not."""
    rng = np.random.default_rng()
    name, _, size = TENSOR_TYPES[tid]
    raw = rng.integers(0, 256, (6, size), dtype=np.uint8)
    for off in F16_SCALE_FIELDS[tid]:
        raw[:, off:off + 2] = rng.uniform(0.1, 2, (6, 1)).astype(np.float16).view(np.uint8)
    with np.errstate(invalid="ignore", over="ignore"):
        assert np.isfinite(quants.dequantize(raw.reshape(-1), T(tid))).all()
        assert nonfinite(TensorInfo("x", tid, (0,), raw.reshape(-1), raw.size)) is False
        for off in F16_SCALE_FIELDS[tid]:
            bad = raw.copy()
            bad[int(rng.integers(0, 6)), off:off + 2] = np.frombuffer(
                np.float16(rng.choice([np.inf, np.nan])).tobytes(), np.uint8)
            assert not np.isfinite(quants.dequantize(bad.reshape(-1), T(tid))).all(), (name, off)
            assert nonfinite(TensorInfo("x", tid, (0,), bad.reshape(-1), bad.size)), (name, off)


# ---------------------------------------------------------------- Llama.metadata

def test_llama_metadata_is_strings(spec, tmp_path):
    spec.set("test.flag", V.BOOL, False)
    spec.set("test.f64", V.FLOAT64, 0.1)
    spec.set("test.neg", V.INT8, -7)
    p = gc.write(spec, tmp_path / "m.gguf")
    with Llama(str(p), n_ctx=16, device="cpu") as llm:
        md = llm.metadata
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in md.items())
        assert "tokenizer.ggml.tokens" not in md and "tokenizer.ggml.scores" not in md
        assert md["llama.block_count"] == "2" and md["test.neg"] == "-7"
        assert md["test.flag"] == "false" and md["test.f64"] == "0.100000"
        assert md["llama.attention.layer_norm_rms_epsilon"] == "0.000010"
        assert md["tokenizer.ggml.model"] == "llama"
        typed = llm._model.file.metadata
        assert typed["llama.block_count"] == 2 and len(typed["tokenizer.ggml.tokens"]) == 320


def test_default_model_metadata():
    with Llama(require_model_path(), n_ctx=16, device="cpu") as llm:
        md = llm.metadata
    assert md["general.architecture"] == "llama" and md["llama.block_count"] == "30"
    assert md["llama.rope.freq_base"] == "100000.000000"
    assert md["tokenizer.ggml.add_bos_token"] == "false"
    assert md["tokenizer.ggml.bos_token_id"] == "1"
    assert not any(k in md for k in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"))
