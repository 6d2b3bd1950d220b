"""Golden data for qwen3moe and qwen35moe from llama.cpp: (re)writes
tests/data/moe_tiny_llamacpp.json.

For each case of CASES a tiny random model (tiny_moe.py, from a fixed seed, so
tests/test_moe_golden.py can write the same file again) is evaluated by
llama.cpp (llama-cpp-python 0.3.36, CPU build) teacher-forced over a fixed
token sequence in one batch; at every position the data keeps its TOP_K most
likely next tokens with their log-probabilities (of the full softmax).

    python tests/golden_moe.py     # LLAMA_CPP_PYTHON: an interpreter with llama_cpp

The models are written by this interpreter (it needs gguf and the tests'
writers); llama.cpp runs in the interpreter LLAMA_CPP_PYTHON names (default:
this one), which needs only llama_cpp and numpy.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
OUT = HERE / "data" / "moe_tiny_llamacpp.json"
TOP_K = 16
N_TOKENS = 96
N_VOCAB = 320
# name: (arch, gguf type name, seed, config overrides)
CASES = {
    "qwen3moe-f32": ("qwen3moe", "F32", 4301, {}),
    "qwen3moe-q8_0": ("qwen3moe", "Q8_0", 4302, {}),
    "qwen35moe-f32": ("qwen35moe", "F32", 4304, {}),
    "qwen35moe-q8_0": ("qwen35moe", "Q8_0", 4305, {}),
    "qwen35moe-f32-fused": ("qwen35moe", "F32", 4303, {"fused": True}),   # ffn_gate_up_exps
}


def tokens_of(seed: int) -> list[int]:
    return np.random.default_rng(seed + 1).integers(3, N_VOCAB, N_TOKENS).tolist()


def write_case(name: str, path: Path) -> Path:
    """The case's model at path (the same bits on every run)."""
    sys.path.insert(0, str(HERE))
    from gguf import GGMLQuantizationType as T
    from fixtures.tiny_moe import write_tiny_qwen3moe, write_tiny_qwen35moe
    arch, wtype, seed, kw = CASES[name]
    write = write_tiny_qwen3moe if arch == "qwen3moe" else write_tiny_qwen35moe
    return write(path, T[wtype], seed=seed, n_vocab=N_VOCAB, **kw)


def top_k(logits: np.ndarray) -> tuple[list, list]:
    """Per row: the TOP_K ids (most likely first) and their log-probabilities."""
    x = logits.astype(np.float64)
    lp = x - x.max(-1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(-1, keepdims=True))
    ids = np.argsort(-lp, -1, kind="stable")[:, :TOP_K]
    return ids.tolist(), np.take_along_axis(lp, ids, -1).round(6).tolist()


_RUN = """
import json, sys
import numpy as np
import llama_cpp
path, tokens, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
llm = llama_cpp.Llama(path, n_ctx=256, n_batch=256, n_ubatch=256, logits_all=True,
                      n_threads=2, verbose=False)
llm.eval(tokens)
np.save(out, np.asarray(llm.scores[:len(tokens)], dtype=np.float32))
"""


def main() -> None:
    exe = os.environ.get("LLAMA_CPP_PYTHON", sys.executable)
    data = {"llama_cpp_python": None, "top_k": TOP_K, "cases": {}}
    with tempfile.TemporaryDirectory() as d:
        for name, (_, _, seed, _) in CASES.items():
            path = write_case(name, Path(d) / f"{name}.gguf")
            tokens = tokens_of(seed)
            out = Path(d) / f"{name}.npy"
            subprocess.run([exe, "-c", _RUN, str(path), json.dumps(tokens), str(out)],
                           check=True)
            ids, lps = top_k(np.load(out))
            data["cases"][name] = {"tokens": tokens, "ids": ids, "logprobs": lps}
            print(name, "done", file=sys.stderr)
        data["llama_cpp_python"] = subprocess.run(
            [exe, "-c", "import llama_cpp; print(llama_cpp.__version__)"], check=True,
            capture_output=True, text=True).stdout.strip()
    OUT.write_text(json.dumps(data, separators=(",", ":")))
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
