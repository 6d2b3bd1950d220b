"""Random-weight GGUF files of real model shapes, for speed only.

Speed does not depend on weight values (BENCHMARKS.md), so the quantized
blocks are random bytes with small f16 scales (and minimums that centre the
weights on zero); norms are ones. Outputs are noise, but finite. Written on the machine that runs the benchmark:

    python benchmarks/synthetic_model.py llama3-8b out.gguf [--type q4_0]
    python benchmarks/synthetic_model.py qwen35-27b out.gguf --type q4_k   # or iq4_xs
    python benchmarks/synthetic_model.py llama3-8b out.gguf --type q4_k_m  # a mix (MIXES)

Every weight type the CPU backend reads (TYPES: f32, f16, bf16, the legacy
quants, q2_K .. q6_K, the i-quants) and the mixes llama.cpp's quantizer writes
(MIXES: Q4_K_M, Q5_K_M, a Q3_K_M-like and a UD-Q3_K_XL-like recipe).

Tensors are generated and written one at a time (a 27B file never sits in
memory). The files load in pyllamakv and in llama.cpp: the metadata carries
what llama.cpp's loader reads (``llama_cpp_keys``): the architecture's
hyper-parameters (for qwen35 also key_length, rope.dimension_sections and the
ssm.* sizes) and a SentencePiece-style vocabulary with <unk>/<s>/</s>, the 256
byte tokens, token types and scores and the special token ids. The earlier
placeholder vocabulary (only "<t{i}>" tokens) loaded, but llama.cpp's
SentencePiece tokenizer falls back to the <0xNN> byte tokens for any text it
cannot match and looks them up unchecked, so tokenizing a prompt aborted the
process (std::out_of_range from unordered_map::at; llama-cpp-python 0.3.36's
llama-simple, checked 2026-12-02). Prompts are still best given as token ids.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES


@dataclass(frozen=True, slots=True)
class Shape:
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    n_vocab: int
    rope_base: float = 500000.0


@dataclass(frozen=True, slots=True)
class Qwen35Shape:
    """A qwen35 hybrid: layer i is full attention when (i + 1) % interval == 0."""
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int          # full attention: query heads (q projection twice as wide: the gate)
    n_head_kv: int
    head_dim: int
    rope_dim: int        # rope on the first rope_dim dims of each head
    n_vocab: int
    nk: int              # Gated DeltaNet key heads
    nv: int              # value heads
    dk: int
    dv: int
    interval: int = 4
    conv: int = 4
    n_nextn: int = 0     # MTP blocks after the trunk
    rope_base: float = 1e7
    eps: float = 1e-6
    n_ctx_train: int = 262144


SHAPES = {
    "llama3-8b": Shape(32, 4096, 14336, 32, 8, 128256),
    "llama2-7b": Shape(32, 4096, 11008, 32, 32, 32000, 10000.0),
    "smollm2-135m": Shape(30, 576, 1536, 9, 3, 49152, 100000.0),
    "llama-tiny": Shape(2, 256, 512, 4, 2, 512, 10000.0),   # CPU smoke runs of the benchmarks
    # Qwen3.5-27B's published configuration (its Hugging Face config.json: 64 layers, every
    # 4th full attention; hidden 5120, ffn 17408, 24 / 4 heads of 256, partial rotary 0.25,
    # rope theta 1e7; linear attention 16 key / 48 value heads of 128, conv 4; vocab 248320,
    # untied; one MTP layer, written with --mtp)
    "qwen35-27b": Qwen35Shape(64, 5120, 17408, 24, 4, 256, 64, 248320, 16, 48, 128, 128),
    # the same layout at test size (every width a multiple of 256 for the k-quants)
    "qwen35-tiny": Qwen35Shape(8, 256, 512, 2, 1, 128, 32, 512, 2, 4, 64, 64,
                               n_ctx_train=4096),
}

# ---------------------------------------------------------------- blocks
#
# Every weight type the CPU backend reads. Per type: the block's f16 fields
# (byte offset, "d" a scale drawn from the type's range or "m" a min set from
# the block's d so that the values centre on zero), and the range of d that
# keeps every weight within about +-0.3 whatever the codes and sub-scales
# (the largest code times the largest sub-scale times d). Centred minimums
# matter: q4_1's random minimum fields, all positive, made every weight
# positive and the 8B shape's logits NaN (issue 41).
_F16 = {
    T.Q4_0: ((0, "d"),), T.Q8_0: ((0, "d"),), T.Q5_0: ((0, "d"),), T.IQ4_NL: ((0, "d"),),
    T.Q4_1: ((0, "d"), (2, "m")), T.Q5_1: ((0, "d"), (2, "m")),
    T.Q2_K: ((80, "d"), (82, "m")), T.Q3_K: ((108, "d"),), T.Q4_K: ((0, "d"), (2, "m")),
    T.Q5_K: ((0, "d"), (2, "m")), T.Q6_K: ((208, "d"),), T.IQ4_XS: ((0, "d"),),
    T.IQ2_XXS: ((0, "d"),), T.IQ2_XS: ((0, "d"),), T.IQ2_S: ((0, "d"),), T.IQ3_XXS: ((0, "d"),),
    T.IQ3_S: ((0, "d"),), T.IQ1_S: ((0, "d"),), T.IQ1_M: (),   # iq1_m: d in the scales' top nibbles
}
# the largest |weight| / d: code range x sub-scale range (q4_1 / q5_1 / q2_K / q4_K / q5_K
# centred: half the code range)
_PER_D = {T.Q4_0: 8, T.Q8_0: 127, T.Q5_0: 16, T.IQ4_NL: 127, T.Q4_1: 8, T.Q5_1: 16,
          T.Q2_K: 15 * 1.5, T.Q3_K: 32 * 4, T.Q4_K: 63 * 7.5, T.Q5_K: 63 * 15.5, T.Q6_K: 128 * 32,
          T.IQ4_XS: 32 * 127, T.IQ2_XXS: 15.5 * 0.25 * 43, T.IQ2_XS: 15.5 * 0.25 * 43,
          T.IQ2_S: 15.5 * 0.25 * 43, T.IQ3_XXS: 15.5 * 0.5 * 62, T.IQ3_S: 31 * 15,
          T.IQ1_S: 15 * 1.125, T.IQ1_M: 15 * 1.125}
# the minimum as a multiple of -d: the codes' mid-point (q2_K / q4_K / q5_K: the
# 6-bit or 4-bit min equals the sub-block's scale, see _kquant_scales)
_MID = {T.Q4_1: 8, T.Q5_1: 16, T.Q2_K: 1.5, T.Q4_K: 7.5, T.Q5_K: 15.5}
FLOATS = (T.F32, T.F16, T.BF16)
TYPES = FLOATS + tuple(_F16)

# Mixes: which tensors get which type, as llama.cpp's quantizer chooses them
# for its presets (the rules, restated from its documented behaviour), and a
# stand-in for unsloth's dynamic UD-Q3_K_XL (its per-tensor choices vary by
# model; this keeps its shape: 3-bit FFN gate / up, 4- to 6-bit attention and
# down projections, more bits at the first and last layers, a 6-bit output).


def _more_bits(i: int, n: int) -> bool:
    """llama.cpp's use_more_bits: the first and last eighth, every third between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _mix_k_m(base: T):
    def pick(name: str, il: int, n: int) -> T:
        if name == "output.weight":
            return T.Q6_K
        if name.endswith(("attn_v.weight", "ffn_down.weight")) and _more_bits(il, n):
            return T.Q6_K
        if name.endswith("attn_qkv.weight"):
            return T.Q6_K if _more_bits(il, n) else T.Q5_K
        return base
    return pick


def _mix_q3_k_m(name: str, il: int, n: int) -> T:
    if name == "output.weight":
        return T.Q6_K
    if name.endswith(("attn_v.weight", "attn_qkv.weight")):
        return T.Q5_K if il < 2 else T.Q4_K
    if name.endswith("ffn_down.weight"):
        return T.Q5_K if il < n // 16 else T.Q4_K
    if name.endswith("attn_output.weight"):
        return T.Q4_K
    return T.Q3_K


def _mix_ud_q3_k_xl(name: str, il: int, n: int) -> T:
    edge = il < 3 or il >= n - 3
    if name == "output.weight":
        return T.Q6_K
    if name == "token_embd.weight":
        return T.Q4_K
    if name.endswith(("ffn_gate.weight", "ffn_up.weight")):
        return T.IQ4_XS if edge else T.Q3_K
    if name.endswith("ffn_down.weight"):
        return T.Q5_K if edge else T.Q4_K
    if name.endswith(("attn_v.weight", "attn_qkv.weight")):
        return T.Q6_K if edge else T.Q5_K
    return T.Q4_K


MIXES = {"q4_k_m": _mix_k_m(T.Q4_K), "q5_k_m": _mix_k_m(T.Q5_K), "q3_k_m": _mix_q3_k_m,
         "ud-q3_k_xl": _mix_ud_q3_k_xl}


def _kquant_scales(rng: np.random.Generator, nb: int) -> np.ndarray:
    """q4_K / q5_K's 12 scale bytes: 8 6-bit scales sc (1..63) and mins equal
    to them (with dmin = mid * d each sub-block is centred), packed as the
    format does (j < 4: low 6 bits of bytes j and j + 4; j >= 4: nibbles of
    byte j + 4, top bits in bytes j - 4 and j)."""
    sc = rng.integers(1, 64, (nb, 8), dtype=np.uint8)
    mn = sc
    out = np.empty((nb, 12), np.uint8)
    out[:, 0:4] = sc[:, :4] | ((sc[:, 4:] >> 4) << 6)
    out[:, 4:8] = mn[:, :4] | ((mn[:, 4:] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:] & 15) | ((mn[:, 4:] & 15) << 4)
    return out


def _quant(rng: np.random.Generator, rows: int, cols: int, qtype: T) -> np.ndarray:
    """Random blocks of qtype: random bytes (every code, grid index and sign
    pattern is valid), then the f16 scales, the minimums and the sub-scales
    that need it set (see _F16)."""
    block, size = GGML_QUANT_SIZES[qtype]
    if cols % block:
        raise ValueError(f"{qtype.name} needs rows of a multiple of {block} values, got {cols}")
    if qtype in FLOATS:
        x = (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)
        if qtype == T.F32:
            return x
        if qtype == T.F16:
            return x.astype(np.float16)
        return (x.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(rows, 2 * cols)
    nb = rows * cols // block
    raw = np.frombuffer(bytearray(rng.bytes(nb * size)), np.uint8).reshape(nb, size)
    top = 0.3 / _PER_D[qtype]
    d = rng.uniform(top / 3, top, nb).astype(np.float16)
    if qtype in (T.Q4_K, T.Q5_K):
        raw[:, 4:16] = _kquant_scales(rng, nb)
    if qtype == T.Q2_K:       # scales[16]: low nibble sc (1..15), high nibble the min = sc
        sc = rng.integers(1, 16, (nb, 16), dtype=np.uint8)
        raw[:, 0:16] = sc | (sc << 4)
    if qtype == T.IQ1_M:      # the f16 d: the top nibbles of bytes 49, 51, 53, 55
        h = d.view(np.uint16)
        for k in range(4):
            raw[:, 49 + 2 * k] = (raw[:, 49 + 2 * k] & 0x0F) | (((h >> (4 * k)) & 15) << 4).astype(np.uint8)
    for off, kind in _F16[qtype]:
        # q4_1 / q5_1: x = d q + m, m < 0; the k-quants: x = d sc q - dmin mn, dmin > 0
        sign = 1.0 if qtype in (T.Q2_K, T.Q4_K, T.Q5_K) else -1.0
        v = d if kind == "d" else (sign * _MID[qtype] * d.astype(np.float32)).astype(np.float16)
        raw[:, off:off + 2] = v.view(np.uint8).reshape(nb, 2)
    return raw.reshape(rows, cols // block * size)


# ---------------------------------------------------------------- tensor lists

def _llama_tensors(s: Shape) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, numpy shape, kind): kind "q" (weight type), "one" (a norm), "f32"."""
    hd = s.n_embd // s.n_head
    t = [("token_embd.weight", (s.n_vocab, s.n_embd), "q"),
         ("output_norm.weight", (s.n_embd,), "one"),
         ("output.weight", (s.n_vocab, s.n_embd), "q")]
    for il in range(s.n_layer):
        b = f"blk.{il}."
        t += [(b + "attn_norm.weight", (s.n_embd,), "one"),
              (b + "attn_q.weight", (s.n_head * hd, s.n_embd), "q"),
              (b + "attn_k.weight", (s.n_head_kv * hd, s.n_embd), "q"),
              (b + "attn_v.weight", (s.n_head_kv * hd, s.n_embd), "q"),
              (b + "attn_output.weight", (s.n_embd, s.n_head * hd), "q"),
              (b + "ffn_norm.weight", (s.n_embd,), "one")]
        t += _ffn(b, s.n_embd, s.n_ff)
    return t


def _ffn(b: str, e: int, f: int) -> list:
    return [(b + "ffn_gate.weight", (f, e), "q"), (b + "ffn_up.weight", (f, e), "q"),
            (b + "ffn_down.weight", (e, f), "q")]


def _attention(b: str, s: Qwen35Shape) -> list:
    e, hd = s.n_embd, s.head_dim
    return [(b + "attn_q.weight", (2 * s.n_head * hd, e), "q"),
            (b + "attn_k.weight", (s.n_head_kv * hd, e), "q"),
            (b + "attn_v.weight", (s.n_head_kv * hd, e), "q"),
            (b + "attn_output.weight", (e, s.n_head * hd), "q"),
            (b + "attn_q_norm.weight", (hd,), "one"), (b + "attn_k_norm.weight", (hd,), "one")]


def _qwen35_tensors(s: Qwen35Shape) -> list[tuple[str, tuple[int, ...], str]]:
    e, kd, vd = s.n_embd, s.nk * s.dk, s.nv * s.dv
    t = [("token_embd.weight", (s.n_vocab, e), "q"), ("output_norm.weight", (e,), "one"),
         ("output.weight", (s.n_vocab, e), "q")]
    for il in range(s.n_layer + s.n_nextn):
        b = f"blk.{il}."
        t += [(b + "attn_norm.weight", (e,), "one"),
              (b + "post_attention_norm.weight", (e,), "one")]
        if il >= s.n_layer or (il + 1) % s.interval == 0:
            t += _attention(b, s)
        else:
            t += [(b + "attn_qkv.weight", (2 * kd + vd, e), "q"),
                  (b + "attn_gate.weight", (vd, e), "q"),
                  (b + "ssm_beta.weight", (s.nv, e), "f32"),
                  (b + "ssm_alpha.weight", (s.nv, e), "f32"),
                  (b + "ssm_conv1d.weight", (2 * kd + vd, s.conv), "f32"),
                  (b + "ssm_a", (s.nv,), "decay"), (b + "ssm_dt.bias", (s.nv,), "f32"),
                  (b + "ssm_norm.weight", (s.dv,), "one"),
                  (b + "ssm_out.weight", (e, vd), "q")]
        t += _ffn(b, e, s.n_ff)
        if il >= s.n_layer:   # the MTP block's own tensors
            t += [(b + "nextn.eh_proj.weight", (e, 2 * e), "q"),
                  (b + "nextn.enorm.weight", (e,), "one"), (b + "nextn.hnorm.weight", (e,), "one"),
                  (b + "nextn.shared_head_norm.weight", (e,), "one")]
    return t


def _data(rng, shape: tuple[int, ...], kind: str, qtype: T) -> np.ndarray:
    if kind == "q":
        return _quant(rng, shape[0], shape[1], qtype)
    if kind == "one":
        return np.ones(shape, np.float32)
    if kind == "decay":   # ssm_a = -exp(A_log) < 0: every head's state decays
        return -rng.uniform(0.5, 2.0, shape).astype(np.float32)
    return (rng.standard_normal(shape) * 0.02).astype(np.float32)


# ---------------------------------------------------------------- metadata

def _vocab(w: GGUFWriter, n_vocab: int) -> None:
    """A SentencePiece-style vocabulary llama.cpp's tokenizer can run on."""
    if n_vocab < 300:
        raise ValueError(f"a vocabulary of {n_vocab} tokens cannot hold the 259 fixed ones")
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    toks += [f"<t{i}>" for i in range(len(toks), n_vocab)]
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (n_vocab - 259))  # unknown, control, byte
    w.add_token_scores([0.0] * 3 + [0.0] * 256 + [-float(i) for i in range(n_vocab - 259)])
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)


def _llama_metadata(w: GGUFWriter, s: Shape) -> None:
    _trunk_metadata(w, s, 131072, s.n_embd // s.n_head, 1e-5)


def _trunk_metadata(w: GGUFWriter, s: Shape | Qwen35Shape, n_ctx_train: int, rope_dim: int,
                    eps: float) -> None:
    """The keys every architecture here has: sizes, heads, rope, the norms' epsilon."""
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(s.n_embd)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_rope_dimension_count(rope_dim)
    w.add_rope_freq_base(s.rope_base)
    w.add_layer_norm_rms_eps(eps)


def qwen35_metadata(w: GGUFWriter, s: Qwen35Shape, n_ctx_train: int | None = None) -> None:
    """qwen35's hyper-parameters from s, or from anything with Qwen35Shape's field
    names (tests/tiny_qwen35.py's Qwen35Config); the context length is s.n_ctx_train
    unless given. Not the block count (trunk + MTP blocks) nor the vocabulary."""
    _trunk_metadata(w, s, s.n_ctx_train if n_ctx_train is None else n_ctx_train, s.rope_dim,
                    s.eps)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    # llama.cpp requires the (interleaved multi-axis) rope sections; text uses the first
    q = s.rope_dim // 2                 # rotated pairs: the published [11, 11, 10] of 32
    a = q * 11 // 32
    w.add_rope_dimension_sections([a, a, q - 2 * a, 0])
    w.add_full_attention_interval(s.interval)
    w.add_ssm_conv_kernel(s.conv)
    w.add_ssm_state_size(s.dk)
    w.add_ssm_group_count(s.nk)
    w.add_ssm_time_step_rank(s.nv)
    w.add_ssm_inner_size(s.nv * s.dv)
    if s.n_nextn:
        w.add_nextn_predict_layers(s.n_nextn)


def llama_cpp_keys(arch: str) -> tuple[str, ...]:
    """Metadata keys llama.cpp's loader reads without a default, for arch, plus the
    vocabulary keys its SentencePiece tokenizer needs to tokenize text."""
    base = ["general.architecture", f"{arch}.context_length", f"{arch}.embedding_length",
            f"{arch}.block_count", f"{arch}.feed_forward_length", f"{arch}.attention.head_count",
            f"{arch}.attention.layer_norm_rms_epsilon", "tokenizer.ggml.model",
            "tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores",
            "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"]
    if arch == "qwen35":
        base += [f"{arch}.attention.key_length", f"{arch}.rope.dimension_sections",
                 f"{arch}.ssm.conv_kernel", f"{arch}.ssm.inner_size", f"{arch}.ssm.state_size",
                 f"{arch}.ssm.time_step_rank", f"{arch}.ssm.group_count"]
    return tuple(base)


# ---------------------------------------------------------------- writing

def _type_of(qtype: T | str, name: str, n_layer: int) -> T:
    """The type of a quantized tensor: qtype, or the mix's choice for it."""
    if isinstance(qtype, T):
        return qtype
    il = int(name.split(".")[1]) if name.startswith("blk.") else -1
    return MIXES[qtype](name, il, n_layer)


def write(shape: Shape | Qwen35Shape, path: str | Path, qtype: T | str = T.Q4_0, seed: int = 0,
          n_nextn: int | None = None) -> Path:
    """The file at path; qtype a weight type (TYPES) or a mix's name (MIXES);
    n_nextn overrides a qwen35 shape's MTP blocks."""
    if not (qtype in TYPES or qtype in MIXES):
        name = qtype.name if isinstance(qtype, T) else qtype
        raise ValueError(f"weight type {name} is not one the generator writes: "
                         f"{', '.join(t.name for t in TYPES)}, or a mix: {', '.join(MIXES)}")
    rng = np.random.default_rng(seed)
    hybrid = isinstance(shape, Qwen35Shape)
    if hybrid and n_nextn is not None:
        shape = replace(shape, n_nextn=n_nextn)
    w = GGUFWriter(str(path), "qwen35" if hybrid else "llama")
    w.add_name("synthetic")
    w.add_block_count(shape.n_layer + (shape.n_nextn if hybrid else 0))
    (qwen35_metadata if hybrid else _llama_metadata)(w, shape)
    w.add_vocab_size(shape.n_vocab)
    _vocab(w, shape.n_vocab)
    tensors = (_qwen35_tensors if hybrid else _llama_tensors)(shape)
    types = {}
    for name, shp, kind in tensors:
        if kind == "q":
            qt = types[name] = _type_of(qtype, name, shape.n_layer)
            block, size = GGML_QUANT_SIZES[qt]
            nbytes = shp[0] * shp[1] // block * size
            if qt == T.F32:
                w.add_tensor_info(name, shp, np.dtype(np.float32), nbytes)
            elif qt == T.F16:
                w.add_tensor_info(name, shp, np.dtype(np.float16), nbytes)
            else:
                w.add_tensor_info(name, (shp[0], shp[1] // block * size), np.dtype(np.uint8),
                                  nbytes, raw_dtype=qt)
        else:
            w.add_tensor_info(name, shp, np.dtype(np.float32), 4 * int(np.prod(shp)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, shp, kind in tensors:     # one tensor in memory at a time
        w.write_tensor_data(_data(rng, shp, kind, types.get(name)))
    w.close()
    return Path(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("path")
    ap.add_argument("--type", default=None, choices=[t.name.lower() for t in TYPES] + list(MIXES),
                    help="weight type or mix (default: q4_0; q4_k for qwen35 shapes)")
    ap.add_argument("--mtp", action="store_true", help="qwen35: one MTP block, as published")
    a = ap.parse_args()
    shape = SHAPES[a.shape]
    qtype = a.type or ("q4_k" if isinstance(shape, Qwen35Shape) else "q4_0")
    write(shape, a.path, qtype if qtype in MIXES else T[qtype.upper()], n_nextn=1 if a.mtp else None)


if __name__ == "__main__":
    main()
