"""Random-weight GGUF files of real model shapes, for speed only: the command line.

    python benchmarks/synthetic_model.py llama3-8b out.gguf [--type q4_0]
    python benchmarks/synthetic_model.py qwen35-27b out.gguf --type q4_k   # or iq4_xs
    python benchmarks/synthetic_model.py llama3-8b out.gguf --type q4_k_m  # a mix (MIXES)
    python benchmarks/synthetic_model.py qwen35moe-35b-a3b out.gguf     # q4_k_m by default

The writer, its shapes, weight types and mixes are tests/fixtures/synthetic.py
(the tests write the small shapes with it); its docstring says what the files
hold and why.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fixtures.synthetic import (MIXES, SHAPES, TYPES, Qwen35MoeShape, Qwen35Shape, T,  # noqa: E402
                                write)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("path")
    ap.add_argument("--type", default=None, choices=[t.name.lower() for t in TYPES] + list(MIXES),
                    help="weight type or mix (default: q4_0; q4_k for qwen35 shapes, q4_k_m "
                         "for qwen35moe)")
    ap.add_argument("--mtp", action="store_true", help="qwen35: one MTP block, as published")
    a = ap.parse_args()
    shape = SHAPES[a.shape]
    qtype = a.type or ("q4_k_m" if isinstance(shape, Qwen35MoeShape) else
                       "q4_k" if isinstance(shape, Qwen35Shape) else "q4_0")
    write(shape, a.path, qtype if qtype in MIXES else T[qtype.upper()], n_nextn=1 if a.mtp else None)


if __name__ == "__main__":
    main()
