"""Tiny random-weight GGUF models, written with gguf.GGUFWriter, for each
architecture and weight type the engine supports. Weights are fresh random
values per call; quantized types are made with gguf.quants where it can
quantize, else from random codes with small finite f16 scales."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter, quants
from gguf.constants import GGML_QUANT_SIZES

# byte offsets of f16 scale fields inside one block, for the formats gguf cannot quantize
_F16_FIELDS = {T.Q2_K: (80, 82), T.Q3_K: (108,), T.Q4_K: (0, 2), T.Q5_K: (0, 2),
               T.Q6_K: (208,), T.IQ4_NL: (0,), T.IQ2_XXS: (0,), T.IQ2_XS: (0,), T.IQ2_S: (0,),
               T.IQ3_XXS: (0,), T.IQ3_S: (0,), T.IQ1_S: (0,), T.IQ1_M: (), T.IQ4_XS: (0,)}
_QUANTIZABLE = {T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0}

ARCHS = ("llama", "qwen2", "qwen3")


def set_block_scales(raw: np.ndarray, qtype: T, v: np.ndarray) -> None:
    """Writes the f16 value(s) v (nb,) into every f16 scale field of the blocks
    raw (nb, size); iq1_m keeps its one f16 in the top nibbles of bytes 49, 51,
    53, 55 (nibble k of the f16 in byte 49 + 2k)."""
    bits = np.asarray(v, np.float16).view(np.uint16)
    if qtype == T.IQ1_M:
        for k in range(4):
            nib = ((bits >> (4 * k)) & 15).astype(np.uint8)
            raw[:, 49 + 2 * k] = (raw[:, 49 + 2 * k] & 0x0F) | (nib << 4)
        return
    for off in _F16_FIELDS[qtype]:
        raw[:, off:off + 2] = bits.view(np.uint8).reshape(-1, 2)


def _tensor(rng, rows: int, cols: int, qtype: T, scale: float):
    """(rows, cols) weight in qtype: returns (data, raw_dtype or None)."""
    x = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
    if qtype == T.F32:
        return x, None
    if qtype == T.F16:
        return x.astype(np.float16), None
    if qtype in _QUANTIZABLE:
        return quants.quantize(x, qtype), qtype
    block, size = GGML_QUANT_SIZES[qtype]
    nb = rows * cols // block
    raw = rng.integers(0, 256, (nb, size), dtype=np.uint8)
    set_block_scales(raw, qtype, np.ones(nb, np.float16))
    # values are linear in the f16 scales: rescale each block to an rms of `scale`
    vals = quants.dequantize(raw.reshape(-1), qtype).reshape(nb, block).astype(np.float64)
    rms = np.sqrt(np.mean(vals * vals, axis=1)) + 1e-3
    k = (scale / rms * rng.uniform(0.7, 1.3, nb)).astype(np.float16)
    set_block_scales(raw, qtype, k)
    return raw.reshape(rows, cols // block * size), qtype


def write_tiny_model(path: str | Path, arch: str = "llama", wtype: T = T.Q8_0, *,
                     n_vocab: int = 320, n_embd: int = 256, n_layer: int = 2, n_head: int = 4,
                     n_head_kv: int = 2, n_ff: int = 512, tied: bool = False,
                     seed: int | None = None, vocab: bool = False) -> Path:
    """Writes a random model and returns its path; vocab=True adds a
    SentencePiece-style vocab (<unk> <s> </s>, 256 byte tokens, then pieces)
    so that ``Llama`` can load it."""
    rng = np.random.default_rng(seed)
    hd = n_embd // n_head
    w = GGUFWriter(str(path), arch)
    w.add_block_count(n_layer)
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    if vocab:
        _add_vocab(w, n_vocab)

    def add(name, rows, cols, qtype, scale):
        data, raw = _tensor(rng, rows, cols, qtype, scale)
        if raw is None:
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_dtype=raw)

    def vec(name, n, base=1.0, spread=0.2):
        w.add_tensor(name, (base + spread * rng.standard_normal(n)).astype(np.float32))

    add("token_embd.weight", n_vocab, n_embd, wtype, 1.0)
    vec("output_norm.weight", n_embd)
    if not tied:
        add("output.weight", n_vocab, n_embd, wtype, 1.0 / np.sqrt(n_embd))
    s_in, s_ff = 1.0 / np.sqrt(n_embd), 1.0 / np.sqrt(n_ff)
    for il in range(n_layer):
        b = f"blk.{il}."
        vec(b + "attn_norm.weight", n_embd)
        add(b + "attn_q.weight", n_head * hd, n_embd, wtype, s_in)
        add(b + "attn_k.weight", n_head_kv * hd, n_embd, wtype, s_in)
        add(b + "attn_v.weight", n_head_kv * hd, n_embd, wtype, s_in)
        add(b + "attn_output.weight", n_embd, n_head * hd, wtype, s_in)
        if arch == "qwen2":
            vec(b + "attn_q.bias", n_head * hd, 0.0, 0.5)
            vec(b + "attn_k.bias", n_head_kv * hd, 0.0, 0.5)
            vec(b + "attn_v.bias", n_head_kv * hd, 0.0, 0.5)
        if arch == "qwen3":
            vec(b + "attn_q_norm.weight", hd)
            vec(b + "attn_k_norm.weight", hd)
        vec(b + "ffn_norm.weight", n_embd)
        add(b + "ffn_gate.weight", n_ff, n_embd, wtype, s_in)
        add(b + "ffn_up.weight", n_ff, n_embd, wtype, s_in)
        add(b + "ffn_down.weight", n_embd, n_ff, wtype, s_ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


def _add_vocab(w: GGUFWriter, n_vocab: int) -> None:
    assert n_vocab > 259, "the vocab needs room for 3 specials and 256 bytes"
    pieces = [f"\u2581w{i}" for i in range(n_vocab - 259)]
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces)
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * len(pieces))
    w.add_token_scores([0.0] * 259 + [-float(i) for i in range(len(pieces))])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)


def tiny_model_fixture(arch: str, n_layer: int, **model_kw):
    """A module-scoped fixture: a fresh tiny random model (Q8_0 weights) of arch with
    n_layer layers, opened as pyllamakv.core.native.Model(path, **model_kw)."""
    @pytest.fixture(scope="module")
    def tiny(tmp_path_factory):
        from pyllamakv.core.native import Model
        path = write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny.gguf", arch, T.Q8_0,
                                n_layer=n_layer)
        with Model(path, **model_kw) as m:
            yield m
    return tiny


def write_weights(w: GGUFWriter, tensors: dict, wtype, keep_f32=lambda name: False) -> None:
    """Adds tensors to w (1-D ones and those keep_f32 names stay f32, the rest in
    wtype) and writes the file: the tail of every tiny-model writer."""
    for name, x in tensors.items():
        if x.ndim == 1 or keep_f32(name) or wtype == T.F32:
            w.add_tensor(name, x)
        elif wtype == T.F16:
            w.add_tensor(name, x.astype(np.float16))
        else:
            assert wtype in _QUANTIZABLE, wtype
            w.add_tensor(name, quants.quantize(x, wtype), raw_dtype=wtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
