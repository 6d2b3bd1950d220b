"""Load time of a GGUF model through ``Llama(model_path)``, beside llama-cpp-python's.

    python benchmarks/bench_load.py [MODEL] [-r 7]

Medians of -r loads in this process after one warm-up (the file in the page
cache), wall and CPU time: ``from pyllamakv import Llama`` (in a fresh
interpreter: numpy, cffi and the core's header, jinja2, tokenizers),
``GGUFFile`` alone, ``Llama()``, and the first ``tokenize`` after it (the
tokenizers-library model is built there, not at load). CPU time is the figure
to compare on a loaded machine: wall time then counts other processes' turns.

llama-cpp-python is not measured here (not a dependency); its figure for the
default model (SmolLM2-135M-Instruct Q4_1, 93 MB), measured by the issue's
author with llama-cpp-python 0.3.36, is 0.14-0.21 s; the target is 2x that.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

from pyllamakv import Llama
from pyllamakv.default_model import default_model_path
from pyllamakv.gguf_file import GGUFFile

LLAMA_CPP_PYTHON_S = (0.14, 0.21)


def clock(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def import_time() -> tuple[float, float]:
    code = ("import time; w, c = time.perf_counter(), time.process_time(); "
            "from pyllamakv import Llama; print(time.perf_counter() - w, time.process_time() - c)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    return float(out[0]), float(out[1])


def median_pair(rows):
    return statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
    ap.add_argument("-r", type=int, default=7, help="loads per figure (median)")
    a = ap.parse_args()
    path = a.model or default_model_path()
    Llama(path).close()                       # warm-up: page cache, lazy imports
    rows = {"from pyllamakv import Llama": [import_time() for _ in range(a.r)],
            "GGUFFile": [], "Llama()": [], "first tokenize": []}
    for _ in range(a.r):
        rows["GGUFFile"].append(clock(lambda: GGUFFile(path))[1:])
        llm, w, c = clock(lambda: Llama(path))
        rows["Llama()"].append((w, c))
        rows["first tokenize"].append(clock(lambda: llm.tokenize(b"Hello, world"))[1:])
        llm.close()
    lo, hi = LLAMA_CPP_PYTHON_S
    print(f"{path} ({os.path.getsize(path) / 1e6:.0f} MB), median of {a.r}, "
          f"load average {os.getloadavg()[0]:.1f}")
    for name, r in rows.items():
        w, c = median_pair(r)
        print(f"  {name:28s} wall {w:6.3f} s   cpu {c:6.3f} s")
    w, c = median_pair(rows["Llama()"])
    print(f"  llama-cpp-python Llama(): {lo:.2f}-{hi:.2f} s (its figure, not run here); "
          f"target <= {2 * hi:.2f} s; Llama() here {w / hi:.2f}x its {hi:.2f} s by wall, "
          f"{c / hi:.2f}x by cpu")


if __name__ == "__main__":
    main()
