"""Random multi-sequence scripts for the bit-for-bit tests (CPU and CUDA):
steps that decode tokens of several sequences at once (sequences joining
and leaving between steps, prompts beside single tokens), truncate, copy and
reset in the middle. run_batched plays a script on one context of
n_seq_max sequences; run_alone replays each sequence's history on a context
of its own. Both return, per sequence, the logits of every token it decoded."""
from __future__ import annotations

import numpy as np

from pyllamakv.core.native import Context


def make_script(rng, n_seq: int, n_vocab: int, n_ctx: int, n_batch: int, n_events: int):
    content = [[] for _ in range(n_seq)]
    events = []
    for _ in range(n_events):
        r = rng.random()
        held = [s for s in range(n_seq) if content[s]]
        if r < 0.10 and held:
            s = int(rng.choice(held))
            n = int(rng.integers(0, len(content[s]) + 1))
            events.append(("truncate", s, n))
            content[s] = content[s][:n]
        elif r < 0.20 and held and n_seq > 1:
            src = int(rng.choice(held))
            dst = int(rng.choice([s for s in range(n_seq) if s != src]))
            n = int(rng.integers(1, len(content[src]) + 1))
            events.append(("copy", src, dst, n))
            content[dst] = content[src][:n]
        elif r < 0.26 and held:
            s = int(rng.choice(held))
            events.append(("reset", s))
            content[s] = []
        else:
            seqs = rng.permutation(n_seq)[:int(rng.integers(1, n_seq + 1))]
            step, room = [], n_batch
            for s in seqs:
                s = int(s)
                want = 1 if content[s] and rng.random() < 0.6 else int(rng.integers(2, 24))
                k = min(want, room, n_ctx - len(content[s]))
                if k <= 0:
                    continue
                toks = rng.integers(0, n_vocab, k).tolist()
                step.append((s, toks))
                content[s] = content[s] + toks
                room -= k
            if step:
                events.append(("step", step))
    return events


def run_batched(make_ctx, events, n_seq: int):
    """make_ctx(n_seq_max) -> Context. Every token's logits, per sequence."""
    out = [[] for _ in range(n_seq)]
    with make_ctx(n_seq) as c:
        for ev in events:
            if ev[0] == "step":
                toks = [t for _, ts in ev[1] for t in ts]
                seqs = [s for s, ts in ev[1] for _ in ts]
                rows = c.decode_batch(toks, seqs, [True] * len(toks))
                logits = c.logits()
                assert rows == len(toks) == len(logits)
                k = 0
                for s, ts in ev[1]:
                    out[s].append(logits[k:k + len(ts)])
                    k += len(ts)
            elif ev[0] == "truncate":
                c.seq_truncate(ev[1], ev[2])
            elif ev[0] == "copy":
                c.seq_copy(ev[1], ev[2], ev[3])
            else:
                c.seq_reset(ev[1])
            for s in range(n_seq):
                assert c.seq_n_tokens(s) >= 0
    return out


def run_alone(make_ctx, events, n_seq: int, n_batch: int):
    """Each sequence on a context of its own: decode its tokens as the step did
    (one call), truncate as it was truncated, and for a copy recompute the
    copied prefix. Every token's logits, per sequence."""
    out = [[] for _ in range(n_seq)]
    for s in range(n_seq):
        with make_ctx(1) as c:
            for ev in events:
                if ev[0] == "step":
                    for s2, ts in ev[1]:
                        if s2 == s:
                            c.decode(ts, n_logits=len(ts))
                            out[s].append(c.logits())
                elif ev[0] == "truncate" and ev[1] == s:
                    c.truncate(ev[2])
                elif ev[0] == "reset" and ev[1] == s:
                    c.reset()
                elif ev[0] == "copy" and ev[2] == s:
                    c.reset()
                    src = _content_at(events, ev, ev[1], n_seq)[:ev[3]]
                    for i in range(0, len(src), n_batch):
                        c.decode(src[i:i + n_batch])
    return out


def _content_at(events, upto, s, n_seq):
    """Sequence s's tokens just before event `upto`."""
    content = [[] for _ in range(n_seq)]
    for ev in events:
        if ev is upto:
            return content[s]
        if ev[0] == "step":
            for s2, ts in ev[1]:
                content[s2] = content[s2] + ts
        elif ev[0] == "truncate":
            content[ev[1]] = content[ev[1]][:ev[2]]
        elif ev[0] == "copy":
            content[ev[2]] = content[ev[1]][:ev[3]]
        else:
            content[ev[1]] = []
    raise AssertionError("event not in the script")


def compare(batched, alone, label: str) -> None:
    """Bit for bit, with a message naming the first differing row."""
    for s, (b, a) in enumerate(zip(batched, alone)):
        assert len(b) == len(a), f"{label}: sequence {s}: {len(b)} steps batched, {len(a)} alone"
        for i, (x, y) in enumerate(zip(b, a)):
            if not np.array_equal(x, y):
                d = float(np.max(np.abs(x.astype(np.float64) - y)))
                raise AssertionError(f"{label}: sequence {s}, its step {i} ({len(x)} rows): "
                                     f"logits differ from the sequence alone (max |diff| {d:.3g})")


def context_factory(model, **kw):
    def make(n_seq_max):
        return Context(model, n_seq_max=n_seq_max, **kw)
    return make
