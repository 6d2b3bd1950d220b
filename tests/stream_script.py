"""The KV streaming script (tests/test_stream.py on the CPU's emulated device,
tests/test_cuda.py on CUDA): prefill in n_batch pieces, single-token decodes,
a truncate to the middle, a prefill (and decodes) after it, a reset, a prefill."""
from __future__ import annotations

import numpy as np


def run(c, tokens, n_batch, decodes_after_truncate=0):
    """Drives the context c (logits_all=True, empty) through the script: every
    logit row, and c.kv_stats() as it stands before the reset."""
    out = []
    n = len(tokens)
    for i in range(0, n - 10, n_batch):
        c.decode(tokens[i:min(i + n_batch, n - 10)])
        out.append(c.logits())
    for t in tokens[n - 10:]:
        c.decode([t])
        out.append(c.logits())
    c.truncate(n // 2)
    c.decode(tokens[:7])
    out.append(c.logits())
    for t in tokens[7:7 + decodes_after_truncate]:
        c.decode([t])
        out.append(c.logits())
    stats = c.kv_stats()
    c.reset()
    c.decode(tokens[:40])
    out.append(c.logits())
    return np.concatenate(out), stats
