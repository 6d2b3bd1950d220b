"""benchmarks/synthetic_model.py: the files it writes load, carry the metadata
llama.cpp's loader needs, and the qwen35-27b shape is the published one."""
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader
from gguf import quants

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import synthetic_model as sm  # noqa: E402

TINY_LLAMA = sm.Shape(2, 256, 512, 4, 2, 512, 10000.0)


def fields(path) -> dict:
    r = GGUFReader(str(path))
    return {k: f for k, f in r.fields.items()}, r


@pytest.fixture(scope="module", params=[("llama", T.Q4_0), ("qwen35", T.Q4_K),
                                        ("qwen35", T.IQ4_XS)], ids=lambda p: f"{p[0]}-{p[1].name}")
def written(request, tmp_path_factory):
    arch, qt = request.param
    shape = TINY_LLAMA if arch == "llama" else sm.SHAPES["qwen35-tiny"]
    path = tmp_path_factory.mktemp("syn") / f"{arch}-{qt.name}.gguf"
    return arch, qt, sm.write(shape, path, qt, seed=4, n_nextn=1 if arch == "qwen35" else None)


def test_metadata_has_what_llama_cpp_reads(written):
    arch, _, path = written
    f, _ = fields(path)
    missing = [k for k in sm.llama_cpp_keys(arch) if k not in f]
    assert not missing, f"missing keys llama.cpp needs: {missing}"
    r = GGUFReader(str(path))
    toks = [bytes(r.fields["tokenizer.ggml.tokens"].parts[i]).decode()
            for i in r.fields["tokenizer.ggml.tokens"].data]
    types = [int(r.fields["tokenizer.ggml.token_type"].parts[i][0])
             for i in r.fields["tokenizer.ggml.token_type"].data]
    assert len(toks) == len(set(toks)) == len(types)
    # the byte tokens SentencePiece falls back to, typed BYTE (6); <unk> <s> </s>
    assert [toks.index(f"<0x{b:02X}>") for b in (0, 10, 255)] == [3, 13, 258]
    assert types[3:259] == [6] * 256 and types[:3] == [2, 3, 3]
    assert toks[int(r.fields["tokenizer.ggml.bos_token_id"].parts[-1][0])] == "<s>"
    assert toks[int(r.fields["tokenizer.ggml.eos_token_id"].parts[-1][0])] == "</s>"


def test_blocks_are_valid_and_finite(written):
    _, qt, path = written
    r = GGUFReader(str(path))
    qs = [t for t in r.tensors if t.tensor_type == qt]
    assert qs, "no tensor of the weight type"
    for t in qs[:6]:
        x = quants.dequantize(t.data, qt)
        assert np.isfinite(x).all() and 0 < np.abs(x).max() < 0.5, (t.name, np.abs(x).max())


def test_pyllamakv_runs_it(written):
    from pyllamakv import Llama
    arch, _, path = written
    with Llama(str(path), n_ctx=128, device="cpu", n_threads=1) as llm:
        ids = llm.tokenize(b"hi\n")
        assert ids[0] == 1 and 13 in ids          # <s>, and the newline byte token
        llm.eval(ids)
        assert np.isfinite(llm.scores).all()
        if arch == "qwen35":
            assert llm._model.n_nextn == 1 and llm._model.n_layer_kv == 2


def test_qwen35_27b_is_the_published_shape():
    s = sm.SHAPES["qwen35-27b"]
    ts = sm._qwen35_tensors(s)
    n = sum(int(np.prod(shape)) for _, shape, _ in ts)
    assert 26.5e9 < n < 27.5e9, n
    attn = [name for name, _, _ in ts if name.endswith("attn_k.weight")]
    assert len(attn) == 16 and attn[0] == "blk.3.attn_k.weight"
    # KV per token of context: 16 layers x 4 heads x 256, K and V, f16: 64 KiB
    assert 16 * 2 * s.n_head_kv * s.head_dim * 2 == 64 << 10
    assert dict((nm, sh) for nm, sh, _ in ts)["blk.0.attn_qkv.weight"] == (2 * 2048 + 6144, 5120)


def test_unsupported_type_is_refused(tmp_path):
    with pytest.raises(ValueError, match="Q6_K"):
        sm.write(TINY_LLAMA, tmp_path / "x.gguf", T.Q6_K)
