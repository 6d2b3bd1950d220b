"""Random-weight GGUF files of real model shapes, for speed only.

Speed does not depend on weight values (BENCHMARKS.md), so the quantized
blocks are random bytes with small f16 scales; norms are ones. Outputs are
noise. Written on the machine that runs the benchmark:

    python benchmarks/synthetic_model.py llama3-8b out.gguf [--type q4_0]
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
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


SHAPES = {
    "llama3-8b": Shape(32, 4096, 14336, 32, 8, 128256),
    "llama2-7b": Shape(32, 4096, 11008, 32, 32, 32000, 10000.0),
    "smollm2-135m": Shape(30, 576, 1536, 9, 3, 49152, 100000.0),
}

# byte offset of the f16 scale in one block, per type the generator supports
_SCALE_AT = {T.Q4_0: 0, T.Q8_0: 0, T.Q4_1: 0, T.Q5_0: 0, T.Q5_1: 0}


def _weight(rng: np.random.Generator, rows: int, cols: int, qtype: T) -> np.ndarray:
    block, size = GGML_QUANT_SIZES[qtype]
    nb = rows * cols // block
    raw = rng.integers(0, 256, (nb, size), dtype=np.uint8)
    scales = rng.uniform(0.002, 0.02, nb).astype(np.float16).view(np.uint8).reshape(nb, 2)
    off = _SCALE_AT[qtype]
    raw[:, off:off + 2] = scales
    if qtype in (T.Q4_1, T.Q5_1):
        raw[:, 2:4] = scales          # the min, equally small
    return raw.reshape(rows, cols // block * size)


def write(shape: Shape, path: str | Path, qtype: T = T.Q4_0, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    hd = shape.n_embd // shape.n_head
    w = GGUFWriter(str(path), "llama")
    w.add_name("synthetic")
    w.add_block_count(shape.n_layer)
    w.add_context_length(131072)
    w.add_embedding_length(shape.n_embd)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head_kv)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(shape.rope_base)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(shape.n_vocab)
    # a placeholder vocabulary, so that Llama (which needs a tokenizer) loads the file;
    # prompts are given as token ids
    w.add_tokenizer_model("llama")
    w.add_token_list([f"<t{i}>" for i in range(shape.n_vocab)])
    ones = np.ones(shape.n_embd, np.float32)

    def add(name, rows, cols):
        w.add_tensor(name, _weight(rng, rows, cols, qtype), raw_dtype=qtype)

    add("token_embd.weight", shape.n_vocab, shape.n_embd)
    w.add_tensor("output_norm.weight", ones)
    add("output.weight", shape.n_vocab, shape.n_embd)
    for il in range(shape.n_layer):
        b = f"blk.{il}."
        w.add_tensor(b + "attn_norm.weight", ones)
        add(b + "attn_q.weight", shape.n_head * hd, shape.n_embd)
        add(b + "attn_k.weight", shape.n_head_kv * hd, shape.n_embd)
        add(b + "attn_v.weight", shape.n_head_kv * hd, shape.n_embd)
        add(b + "attn_output.weight", shape.n_embd, shape.n_head * hd)
        w.add_tensor(b + "ffn_norm.weight", ones)
        add(b + "ffn_gate.weight", shape.n_ff, shape.n_embd)
        add(b + "ffn_up.weight", shape.n_ff, shape.n_embd)
        add(b + "ffn_down.weight", shape.n_embd, shape.n_ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("path")
    ap.add_argument("--type", default="q4_0", choices=[t.name.lower() for t in _SCALE_AT])
    a = ap.parse_args()
    write(SHAPES[a.shape], a.path, T[a.type.upper()])


if __name__ == "__main__":
    main()
