"""Random multi-sequence scripts for a hybrid model (recurrent state), CPU and
CUDA: steps that decode tokens of several sequences at once (prompts of up to
`long` tokens beside single tokens), snapshots and truncation back to them,
whole copies (seq_copy, or a state blob saved from one sequence and loaded
into another), resets. run_shared plays a script on one context of n_seq
sequences; run_alone on n_seq contexts of one sequence each, in step (a copy
there goes through the state blob, which is the same state). Both return, per
sequence, the logits of every token it decoded.

A hybrid's recurrent state cannot be cut at any position (multiseq_script.py's
truncations and partial copies are a KV cache's), hence this script. Each
sequence's tokens of a step go through the forward pass as one run of one
micro-batch in both plays when n_ubatch >= n_batch, so the per-run ops (conv,
delta rule, attention) see the same inputs."""
from __future__ import annotations

import numpy as np


def make_script(rng, n_seq: int, n_vocab: int, n_ctx: int, n_batch: int, n_events: int,
                long: int = 24):
    content = [0] * n_seq   # at most what each sequence holds ("back" goes to a point played later)
    events = []
    for _ in range(n_events):
        r = rng.random()
        held = [s for s in range(n_seq) if content[s]]
        if r < 0.10 and held:
            events.append(("snapshot", int(rng.choice(held))))
        elif r < 0.20 and held:
            events.append(("back", int(rng.choice(held))))
        elif r < 0.28 and held and n_seq > 1:
            src = int(rng.choice(held))
            dst = int(rng.choice([s for s in range(n_seq) if s != src]))
            events.append(("copy" if rng.random() < 0.5 else "state", src, dst))
            content[dst] = content[src]
        elif r < 0.32 and held:
            s = int(rng.choice(held))
            events.append(("reset", s))
            content[s] = 0
        else:
            seqs = rng.permutation(n_seq)[:int(rng.integers(1, n_seq + 1))]
            step, room = [], n_batch
            for s in seqs:
                s = int(s)
                want = 1 if content[s] and rng.random() < 0.6 else int(rng.integers(2, long + 1))
                k = min(want, room, n_ctx - content[s] - 1)
                if k <= 0:
                    continue
                step.append((s, rng.integers(0, n_vocab, k).tolist()))
                content[s] += k
                room -= k
            if step:
                events.append(("step", step))
    return events


def run_shared(ctx, events, n_seq: int):
    """ctx: a context of n_seq sequences. Every token's logits, per sequence,
    and the restore points the "back" events found."""
    out, points = [[] for _ in range(n_seq)], []
    for ev in events:
        if ev[0] == "step":
            toks = [t for _, ts in ev[1] for t in ts]
            seqs = [s for s, ts in ev[1] for _ in ts]
            rows = ctx.decode_batch(toks, seqs, [True] * len(toks))
            logits = ctx.logits()
            assert rows == len(toks) == len(logits)
            k = 0
            for s, ts in ev[1]:
                out[s].append(logits[k:k + len(ts)].copy())
                k += len(ts)
        elif ev[0] == "snapshot":
            ctx.seq_snapshot(ev[1])
        elif ev[0] == "back":
            n = ctx.seq_n_tokens(ev[1])
            p = ctx.seq_restore_point(ev[1], max(n - 1, 0))
            points.append(p)
            ctx.seq_truncate(ev[1], p)
        elif ev[0] == "copy":
            ctx.seq_copy(ev[1], ev[2])
        elif ev[0] == "state":
            ctx.seq_state_set(ev[2], ctx.seq_state_get(ev[1]))
        else:
            ctx.seq_reset(ev[1])
    return out, points


def run_alone(ones, events, n_seq: int):
    """ones: n_seq contexts of one sequence each, played in step."""
    out, points = [[] for _ in range(n_seq)], []
    for ev in events:
        if ev[0] == "step":
            for s, ts in ev[1]:
                ones[s].decode(ts, n_logits=len(ts))
                out[s].append(ones[s].logits().copy())
        elif ev[0] == "snapshot":
            ones[ev[1]].snapshot()
        elif ev[0] == "back":
            c = ones[ev[1]]
            p = c.restore_point(max(c.n_tokens - 1, 0))
            points.append(p)
            c.truncate(p)
        elif ev[0] in ("copy", "state"):
            ones[ev[2]].state_set(ones[ev[1]].state_get())
        else:
            ones[ev[1]].reset()
    return out, points
