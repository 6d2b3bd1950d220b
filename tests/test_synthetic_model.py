"""The synthetic writer (tests/fixtures/synthetic.py, benchmarks/synthetic_model.py's
command line): the files it writes load, carry the metadata
llama.cpp's loader needs, and the qwen35-27b and qwen35moe-35b-a3b shapes are the
published ones. (llama-cpp-python 0.3.36 loads the qwen35moe files, with and without
the MTP block, and greedy-decodes the same 8 tokens as pyllamakv from one prompt:
checked by hand, 2026-12-07; it is not a test dependency.)"""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader
from gguf import quants

from fixtures import synthetic as sm

TINY_LLAMA = sm.Shape(2, 256, 512, 4, 2, 512, 10000.0)


def fields(path) -> dict:
    r = GGUFReader(str(path))
    return {k: f for k, f in r.fields.items()}, r


CASES = ([("llama", t) for t in sm.TYPES] + [("llama", m) for m in sm.MIXES]
         + [("qwen35", T.Q4_K), ("qwen35", T.IQ4_XS), ("qwen35", "ud-q3_k_xl")]
         + [("qwen35moe", "q4_k_m"), ("qwen35moe", T.Q4_K)])
TINY = {"qwen35": "qwen35-tiny", "qwen35moe": "qwen35moe-tiny"}


def _name(qt) -> str:
    return qt if isinstance(qt, str) else qt.name


@pytest.fixture(scope="module", params=CASES, ids=lambda p: f"{p[0]}-{_name(p[1])}")
def written(request, tmp_path_factory):
    arch, qt = request.param
    shape = TINY_LLAMA if arch == "llama" else sm.SHAPES[TINY[arch]]
    path = tmp_path_factory.mktemp("syn") / f"{arch}-{_name(qt)}.gguf"
    return arch, qt, sm.write(shape, path, qt, seed=4, n_nextn=None if arch == "llama" else 1)


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
    arch, qt, path = written
    r = GGUFReader(str(path))
    if isinstance(qt, str):     # a mix: the types its rules give, each tensor its own
        n_layer = TINY_LLAMA.n_layer if arch == "llama" else sm.SHAPES[TINY[arch]].n_layer
        qs = [t for t in r.tensors if t.tensor_type != T.F32]
        assert {t.tensor_type for t in qs} == {sm._type_of(qt, t.name, n_layer) for t in qs}
        assert all(t.tensor_type == sm._type_of(qt, t.name, n_layer) for t in qs)
    else:
        qs = [t for t in r.tensors if t.tensor_type == qt and "norm" not in t.name]
    assert qs, "no tensor of the weight type"
    for t in qs[:6]:
        x = quants.dequantize(t.data, t.tensor_type)
        assert np.isfinite(x).all() and 0 < np.abs(x).max() < 0.5, (t.name, np.abs(x).max())
        # centred: no type's minimum pushes every weight to one side (q4_1's did)
        assert abs(float(x.mean())) < 0.05 * float(np.abs(x).max()), (t.name, float(x.mean()))


def test_mix_recipes_follow_llama_cpp():
    n = 32
    q4km = sm.MIXES["q4_k_m"]
    assert q4km("output.weight", -1, n) == T.Q6_K and q4km("token_embd.weight", -1, n) == T.Q4_K
    more = [i for i in range(n) if q4km(f"blk.{i}.ffn_down.weight", i, n) == T.Q6_K]
    assert more[:4] == [0, 1, 2, 3] and more[-4:] == [28, 29, 30, 31] and 6 in more and 5 not in more
    assert q4km("blk.5.attn_q.weight", 5, n) == T.Q4_K
    q3km = sm.MIXES["q3_k_m"]
    assert [q3km(f"blk.{i}.attn_v.weight", i, n) for i in (0, 1, 2)] == [T.Q5_K, T.Q5_K, T.Q4_K]
    assert q3km("blk.9.ffn_up.weight", 9, n) == T.Q3_K and q3km("blk.9.attn_output.weight", 9, n) == T.Q4_K


def test_pyllamakv_runs_it(written):
    from pyllamakv import Llama
    arch, _, path = written
    with Llama(str(path), n_ctx=128, device="cpu", n_threads=1) as llm:
        ids = llm.tokenize(b"hi\n")
        assert ids[0] == 1 and 13 in ids          # <s>, and the newline byte token
        llm.eval(ids)
        assert np.isfinite(llm.scores).all()
        if arch != "llama":
            assert llm._model.n_nextn == 1 and llm._model.n_layer_kv == 2
        if arch == "qwen35moe":
            hp = llm._model.hparams
            assert (hp["n_expert"], hp["n_expert_used"], hp["n_ff_exp"], hp["n_ff_shexp"]) == \
                (8, 2, 256, 256)
            out = llm.create_completion(ids, max_tokens=4, temperature=0)
            assert out["usage"]["completion_tokens"] == 4


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


def test_qwen35moe_35b_a3b_is_the_published_shape():
    """35B parameters, about 3B of them used per token (8 of 256 experts), 40 layers of which
    10 are full attention; the experts stacked as llama.cpp's converter writes them."""
    s = sm.SHAPES["qwen35moe-35b-a3b"]
    ts = sm._qwen35_tensors(s)
    size = {nm: int(np.prod(sh)) for nm, sh, _ in ts}
    n = sum(size.values())
    routed = sum(v for k, v in size.items() if "_exps." in k)
    active = n - routed * (1 - s.n_used / s.n_expert) - size["token_embd.weight"]
    assert 34.5e9 < n < 36e9 and 2.5e9 < active < 3.5e9, (n, active)
    assert len([k for k in size if k.endswith("attn_k.weight")]) == 10
    shapes = {nm: sh for nm, sh, _ in ts}
    assert shapes["blk.0.ffn_gate_exps.weight"] == (256, 512, 2048)
    assert shapes["blk.0.ffn_down_exps.weight"] == (256, 2048, 512)
    assert shapes["blk.0.ffn_gate_inp_shexp.weight"] == (2048,)
    assert shapes["blk.0.attn_qkv.weight"] == (2 * 16 * 128 + 32 * 128, 2048)
    q4km = sm.MIXES["q4_k_m"]   # the experts' down projections take the more-bits rule
    assert q4km("blk.0.ffn_down_exps.weight", 0, 40) == T.Q6_K
    assert q4km("blk.5.ffn_down_exps.weight", 5, 40) == T.Q4_K
    assert q4km("blk.5.ffn_gate_exps.weight", 5, 40) == T.Q4_K


def test_unsupported_type_is_refused(tmp_path):
    with pytest.raises(ValueError, match="Q8_1"):
        sm.write(TINY_LLAMA, tmp_path / "x.gguf", T.Q8_1)
    with pytest.raises(ValueError, match="q9_k_m"):
        sm.write(TINY_LLAMA, tmp_path / "x.gguf", "q9_k_m")


def test_command_line_writes_a_file(tmp_path):
    """benchmarks/synthetic_model.py, run as the GPU machine runs it."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "synthetic_model.py"
    out = tmp_path / "tiny.gguf"
    subprocess.run([sys.executable, str(script), "llama-tiny", str(out), "--type", "q8_0"],
                   check=True, capture_output=True, timeout=300)
    f, r = fields(out)
    assert "llama.block_count" in f
    assert {t.tensor_type for t in r.tensors if t.name.endswith("attn_q.weight")} == {T.Q8_0}
