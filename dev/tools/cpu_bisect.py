"""Hashes of the CPU backend's logits for the first golden prompt on copies of
a model cut to 1..K layers: run on two machines and compare, to find the
first layer where their CPU builds part (tools/truncate_gguf.py makes the
copies). usage: python dev/tools/cpu_bisect.py MODEL.gguf GOLDEN.json K"""
import hashlib
import json
import os
import subprocess
import sys

import numpy as np

from pyllamakv.core.native import Context, Model

model, gfile, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
entry = next(iter(json.loads(open(gfile).read()).values()))
toks = entry["prompt_tokens"] + entry["greedy"]
here = os.path.dirname(os.path.abspath(__file__))
for layers in range(1, k + 1):
    cut = f"/tmp/cut{layers}.gguf"
    subprocess.run([sys.executable, os.path.join(here, "truncate_gguf.py"), model, cut, str(layers)],
                   check=True, capture_output=True)
    with Model(cut, device="cpu") as m, Context(m, n_ctx=512, logits_all=True, n_threads=2) as c:
        c.decode(toks)
        L = c.logits()
    rows = " ".join(hashlib.md5(L[i].tobytes()).hexdigest()[:6] for i in (19, 20, 21, 22, len(toks) - 1))
    print(f"{layers} layers: rows 19-22, last: {rows}; row-21 sum {np.float64(L[21]).sum():.9g}", flush=True)
