"""The phase arena's script (tests/test_arena.py on the CPU's emulated device,
tests/test_cuda_arena.py on CUDA): prefill / decode / prefill / decode with a
truncate in the middle and a call whose last micro-batch is decode-sized, and
the checks of its statistics against the planner."""
from __future__ import annotations

import numpy as np

from pyllamakv.core.ffi import ffi, lib
from pyllamakv.core.native import Context, row_bytes

DECODE_ROWS = 16   # native/src/arena.h LKV_DECODE_ROWS


def row_sizes(m, type_k="f16", type_v="f16") -> tuple[int, int]:
    hp = m.hparams
    n = hp["n_head_kv"] * hp["head_dim"]
    return row_bytes(type_k, n), row_bytes(type_v, n)


def plan(m, chunk, n_ctx, pool, n, arena=0, type_k="f16", type_v="f16"):
    """The core's plan (lkv_plan_compute) for this model's cache: (plan, resident)."""
    rbk, rbv = row_sizes(m, type_k, type_v)
    L = m.n_layer_kv
    p = ffi.new("lkv_plan_params *", dict(n_layer=L, kv_chunk=chunk, row_bytes_k=rbk,
                                          row_bytes_v=rbv, n_ctx=n_ctx, n_ubatch=32,
                                          pool_bytes=pool, arena_bytes=arena))
    out = ffi.new("lkv_plan *")
    res = ffi.new("int32_t[]", L)
    assert lib.lkv_plan_compute(p, n, out, res) == 0
    return out, list(res)


def run(m, tokens, pool, arena, *, chunk=16, n_ctx=640, ubatch=32, truncate=True, **kw):
    """Every logit row and, per call, (kind, n_tokens before, n_tokens after, stats);
    kind: 'prefill' (ends with a micro-batch wider than DECODE_ROWS), 'decode', or
    'mixed' (a prefill micro-batch, then a decode-sized one). truncate=False for
    hybrids (their recurrent state returns only to its snapshots)."""
    assert ubatch > DECODE_ROWS and len(tokens) >= 420
    c = Context(m, n_ctx=n_ctx, n_batch=128, n_ubatch=ubatch, kv_chunk=chunk,
                kv_pool_bytes=pool, logits_all=True, phase_arena=arena, **kw)
    out, calls = [], []

    def call(kind, toks):
        before = c.n_tokens
        c.decode(toks)
        out.append(c.logits())
        calls.append((kind, before, c.n_tokens, c.kv_stats()))

    for i in range(0, 256, 128):                 # prefill 256 tokens
        call("prefill", tokens[i:i + 128])
    for t in tokens[256:268]:                    # decode
        call("decode", [t])
    call("prefill", tokens[268:268 + 2 * ubatch])   # prefill again
    for t in tokens[340:352]:
        call("decode", [t])
    if truncate:
        c.truncate(c.n_tokens // 2 + 3)          # truncate in the middle of a chunk
    for t in tokens[352:360]:
        call("decode", [t])
    call("mixed", tokens[360:360 + ubatch + 5])
    for t in tokens[400:408]:
        call("decode", [t])
    c.close()
    return np.concatenate(out), calls


def check_stats(m, calls, ref_calls, pool, *, chunk=16, n_ctx=640, type_k="f16",
                type_v="f16") -> int:
    """The arena run's statistics (calls) against the planner and the run without
    the arena (ref_calls); returns the bytes per decode token the arena saved,
    summed over the steady decode steps."""
    rbk, rbv = row_sizes(m, type_k, type_v)
    L = m.n_layer_kv
    cb = chunk * (rbk + rbv)
    saved = 0
    prev_kind = prev_end = None
    for (kind, before, n, st), (_, _, _, rst) in zip(calls, ref_calls):
        A = st["arena_bytes"]
        assert A > 0, "the context has no phase arena"
        base, base_res = plan(m, chunk, n_ctx, pool, n, 0, type_k, type_v)
        where = f"{kind} call at {before} -> {n} tokens, pool {pool}"
        assert rst["resident_chunks"] == base_res, where
        if kind == "prefill":     # the arena is the workspace: the pool's chunks only
            assert st["arena_resident_bytes"] == 0, where
            assert st["resident_chunks"] == base_res, where
            prev_kind, prev_end = kind, n
            continue
        got, res = plan(m, chunk, n_ctx, pool, n, A, type_k, type_v)
        e = got.arena_chunks
        assert e == (min(A // (L * cb), -(-n_ctx // chunk) - base_res[0])
                     if base.ring_bytes else 0), where
        assert st["resident_chunks"] == res == [r + e for r in base_res], (
            f"{where}: resident {st['resident_chunks']}, planned {res} (arena chunks {e})")
        assert st["arena_resident_bytes"] == L * e * cb, where
        # the step where the pool starts or stops streaming refills its slots (as without
        # the arena): the streamed bytes are checked on the other steps
        starts = prev_end is not None and (base.ring_bytes > 0) != (
            plan(m, chunk, n_ctx, pool, prev_end, 0, type_k, type_v)[0].ring_bytes > 0)
        prev_end = n
        if kind == "decode" and not starts:
            r0 = base_res[0]
            # entering decode refills the arena's chunks from the host, once
            # (a mixed call entered decode in its last micro-batch)
            steady = prev_kind in ("decode", "mixed")
            refill = 0
            if not steady:
                refill = L * max(0, min(before, (r0 + e) * chunk) - r0 * chunk) * (rbk + rbv)
            assert st["bytes_streamed_last"] == got.streamed_bytes + refill, (
                f"{where}: streamed {st['bytes_streamed_last']}, planned {got.streamed_bytes} "
                f"+ refill {refill}")
            if steady:
                assert rst["bytes_streamed_last"] == base.streamed_bytes, where
                saved += rst["bytes_streamed_last"] - st["bytes_streamed_last"]
                assert (rst["bytes_streamed_last"] - st["bytes_streamed_last"]
                        == L * min(e * chunk, max(0, n - 1 - r0 * chunk)) * (rbk + rbv)), where
        prev_kind = kind
    return saved
