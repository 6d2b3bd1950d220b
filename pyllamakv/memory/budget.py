"""gpu_memory_mib: the device memory a Llama may take, split between its parts.

A Llama's device memory is four parts: the weights, the workspace (the
context's micro-batch buffers and the CUDA backend's own state), the
recurrent state of a hybrid, and the KV cache (its pool, or the whole cache
when all of it is resident). ``plan_budget`` gives the KV what the other three
leave of the budget. Every part is the list of allocations the core makes:

- weights: each distinct tensor of the GGUF, one cudaMalloc of its bytes
  (cuda/backend.cu upload_weight: a tied output shares token_embd's copy);
- workspace: the micro-batch buffers (arena.c ws_list_of; with the phase
  arena, CUDA contexts with a pool and n_ubatch > DECODE_ROWS, one
  allocation for them all, counted once, and the same buffers again at
  DECODE_ROWS rows: the arena is lent to the KV while decoding and is not
  part of the pool), context.c lkv_context_build's ALLOC list, the KV stream's
  micro-batch rows (kv/stream.c), the logits rows a speculative verification
  adds (context.c wide_logits) and cuda/backend.cu cuda_ctx_init's buffers;
- recurrent: recurrent.c, the live state and each snapshot; with an MTP
  drafter (mtp.c) also its KV of one layer, all resident, and its buffers;
- KV: all resident, two planes per attention layer (kv/cache.c) of every
  sequence; bounded, one pool (kv/stream.c) that n_seq_max sequences share,
  each at least a sequence's minimum (kv/plan.h lkv_plan_shares). With
  n_seq_max > 1 a batched step gives a logits row per sequence, so the wide
  logits rows are counted too.

Each allocation is rounded up to the driver's granularity (``granule``) so the
sum bounds what NVML sees. The CUDA runtime's own context (created before any
of this, a few hundred MiB that no setting changes) is outside the budget.
On the CPU the same accounting holds the emulated device to the same plan.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..core.native import type_id
from ..gguf.arch_qwen35 import n_layer_kv, recurrent_bytes
from ..errors import MemoryBudgetError, PoolTooSmallError

MIB = 1 << 20
SMALL = 1 << 20           # cudaMalloc: below this, sub-allocated in 512-byte steps
PAGE = 2 << 20            # at and above it, whole 2 MiB pages
ATTN_WS_BYTES = 32 << 20  # cuda/backend.cu: the split-attention workspace
WG_SCRATCH_BYTES = 128 << 20   # cuda/gemm_wg.cu WG_SCRATCH: f16 weights of one GEMM
# weight types gemm_wg.cu converts to f16 for the prefill GEMM on sm_90a
# (choose_matmul.cu; q4_1, q5_0, q5_1, q8_0, iq4_nl and iq4_xs take mmq)
WG_TYPES = {0, 1, 30, 2,                  # f32, f16, bf16, q4_0
            10, 11, 12, 13, 14,           # q2_K .. q6_K
            16, 17, 18, 19, 21, 22, 29}   # iq2_xxs, iq2_xs, iq3_xxs, iq1_s, iq3_s, iq2_s, iq1_m


# K / V types cuda/attn_stage.cu decodes to f16 in that scratch (with each other or f16)
STAGE_KV_TYPES = {1, 2, 8}                # f16, q4_0, q8_0


def needs_wg_scratch(tensors, type_k=None, type_v=None) -> bool:
    """Whether a matmul weight (2-D, not the token embedding) has a type gemm_wg
    copies, or the prefill attention decodes K / V (type_k / type_v) in its scratch."""
    if type_k is not None and type_v is not None:
        tk, tv = type_id(type_k, kv=True), type_id(type_v, kv=True)
        if tk in STAGE_KV_TYPES and tv in STAGE_KV_TYPES and (tk, tv) != (1, 1):
            return True
    return any(len(t.shape) == 2 and t.type in WG_TYPES and not t.name.startswith("token_embd")
               for t in tensors)
DECODE_ROWS = 16          # arena.h LKV_DECODE_ROWS: rows of the decode-phase workspace
ARENA_ALIGN = 256         # arena.c WS_ALIGN: each buffer's start inside the arena
N_SNAPSHOTS = 2           # the core's default recurrent-state snapshots (api.c)
MODULE_RESERVE = 64 << 20  # kernel images loaded lazily on first launch, graph memory


def granule(nbytes: int) -> int:
    """Device bytes one cudaMalloc of nbytes occupies (0 bytes: the core asks for 16)."""
    n = max(int(nbytes), 16)
    small = -(-n // 512) * 512
    return small if small < SMALL else -(-n // PAGE) * PAGE   # what rounds up to SMALL is paged


def weight_device_bytes(tensors) -> int:
    """Device bytes of a GGUF's weights: one allocation per distinct tensor
    (tensors: GGUFFile.tensors; two names over one data offset are one copy)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t.nbytes:
            seen[t.offset] = max(seen.get(t.offset, 0), t.nbytes)
    return sum(granule(n) for n in seen.values())


def workspace_allocations(hp: dict, n_ubatch: int, *, logits_all: bool = False,
                          wide_logits: bool = False, embeddings: bool = False,
                          streaming: bool = False, row_bytes_k: int = 0,
                          row_bytes_v: int = 0, wg_scratch: bool = False,
                          arena: bool = False, mtp: bool = False) -> list[int]:
    """Bytes of every device allocation of a context other than the KV cache
    and the recurrent state, for a micro-batch of n_ubatch tokens (arena: the
    phase arena, which the core makes only with a pool and n_ubatch > DECODE_ROWS)."""
    U, hd = n_ubatch, hp["head_dim"]
    nq = hp["n_head"] * hd
    out_width = hp["n_embd"] if embeddings else hp["n_vocab"]
    f = 4    # sizeof(float)
    if arena and streaming and U > DECODE_ROWS:     # one arena, and the decode set
        a = [sum(-(-n // ARENA_ALIGN) * ARENA_ALIGN for n in micro_batch_buffers(hp, U))]
        a += micro_batch_buffers(hp, DECODE_ROWS)
    else:
        a = micro_batch_buffers(hp, U)
    a.append(f * (U if logits_all else 1) * out_width)   # logits
    if wide_logits and not logits_all:                      # several rows without logits_all
        a.append(f * U * out_width)
    if mtp:                                                 # mtp.c: hid, emb, cat, chain, saved
        E = hp["n_embd"]
        a += [f * (U + 1) * E, f * U * E, f * U * 2 * E, f * E, f * 4 * E]
    if hp.get("n_expert"):   # moe.c: router logits, picks, an expert's rows in and out, groups
        X, K, E = hp["n_expert"], hp["n_expert_used"], hp["n_embd"]
        a += [f * U * X, f * U * K, f * U * K, f * U * E, f * U * E, f * U, f * U * K,
              f * U * K, f * U, f * U]
    if streaming:                                           # each layer's micro-batch K and V
        a += [row_bytes_k * U, row_bytes_v * U] * n_layer_kv(hp)
    # cuda_ctx_init: tokens, position, attention workspace, rope table, 8-bit activations
    mtp_in = 2 * hp["n_embd"] if hp.get("n_nextn") else 0    # an MTP block's eh_proj input
    cols = -(-max(hp["n_embd"], hp["n_ff"], nq, mtp_in) // 32) * 32
    rows = max(U, 8)
    nq8 = rows * cols
    a += [4 * U, 4, ATTN_WS_BYTES, 4 * hd * U, nq8, nq8 // 32 * 4, nq8 // 32 * 4]
    if rows > 8:
        a += [nq8, nq8 // 32 * 4, nq8 // 32 * 4]
    # cuda/gemm_wg.cu (sm_90a prefill): the f16 copy of a matmul's input (tiles
    # of 128 tokens x 64 of K), and the f16 weights of one GEMM for the types it
    # converts
    a.append(2 * (-(-U // 128) * 128) * (-(-cols // 64) * 64))
    if wg_scratch:
        a.append(WG_SCRATCH_BYTES)
    return a


def micro_batch_buffers(hp: dict, rows: int) -> list[int]:
    """Bytes of the workspace buffers of a micro-batch of rows tokens (arena.c ws_list_of)."""
    R, hd, f = rows, hp["head_dim"], 4
    nq, nkv = hp["n_head"] * hd, hp["n_head_kv"] * hd
    a = [f * R * hp["n_embd"], f * R * max(nq, hp["n_embd"]), f * R * nq, f * R * nkv,
         f * R * nkv, f * R * hp["n_ff"], f * R * hp["n_ff"], f * R * hp["n_embd"],
         f * R * hp["n_head"] * (hd + 2)]                   # attention state
    if hp.get("full_attn_interval"):                        # hybrid: gate and DeltaNet rows
        vd = hp["ssm_n_v_heads"] * hp["ssm_head_v_dim"]
        cd = 2 * hp["ssm_n_k_heads"] * hp["ssm_head_k_dim"] + vd
        a += [f * R * 2 * nq, f * R * nq, f * R * cd, f * R * cd, f * R * vd,
              f * R * hp["ssm_n_v_heads"], f * R * hp["ssm_n_v_heads"], f * R * vd]
    return a


def workspace_bytes(hp: dict, n_ubatch: int, **kw) -> int:
    return MODULE_RESERVE + sum(granule(n) for n in workspace_allocations(hp, n_ubatch, **kw))


def recurrent_device_bytes(hp: dict, n_snapshots: int = N_SNAPSHOTS) -> int:
    """A hybrid's recurrent state on the device: the live copy and its snapshots."""
    r = recurrent_bytes(hp)
    return 0 if r == 0 else (1 + n_snapshots) * granule(r)


def resident_kv_bytes(hp: dict, n_ctx: int, row_bytes_k: int, row_bytes_v: int) -> int:
    """The whole cache, all resident: a K and a V plane per attention layer."""
    return n_layer_kv(hp) * (granule(row_bytes_k * n_ctx) + granule(row_bytes_v * n_ctx))


@dataclass(slots=True, frozen=True)
class BudgetSplit:
    """What a budget gives each part, in bytes; pool None: the KV is all resident."""
    budget: int
    weights: int
    workspace: int
    recurrent: int
    kv: int                 # device bytes of the KV cache (pool, or all resident planes)
    pool: int | None        # the kv_pool bytes to ask the core for
    note: str = ""          # how n_ubatch was chosen, where a model chose it (plan_budget)

    @property
    def used(self) -> int:
        return self.weights + self.workspace + self.recurrent + self.kv

    def describe(self) -> str:
        m = lambda b: f"{b / MIB:.1f}"   # noqa: E731
        kv = "all resident" if self.pool is None else "pool"
        return (f"device budget {m(self.budget)} MiB: weights {m(self.weights)}, workspace "
                f"{m(self.workspace)}, recurrent state {m(self.recurrent)}, KV {m(self.kv)} "
                f"({kv}) MiB" + (f"; {self.note}" if self.note else ""))


def split_budget(budget: int, weights: int, workspace: int, recurrent: int, resident_kv: int,
                 min_pool: int, pool: int | None = None, pool_auto: bool = True) -> BudgetSplit:
    """The KV's share of budget bytes once the other parts are taken (pure arithmetic).

    pool_auto: the KV takes what is left (all resident when the whole cache fits
    there); else ``pool`` (bytes, None: all resident) must fit in what is left.
    Raises MemoryBudgetError when the weights alone, or the parts with the
    requested pool, exceed the budget, PoolTooSmallError when what is left is
    below the planner's minimum pool.
    """
    mib = lambda b: f"{b / MIB:.1f} MiB"   # noqa: E731
    if weights > budget:
        raise MemoryBudgetError(f"gpu_memory_mib: the weights alone take {mib(weights)} of "
                                f"device memory, more than the budget of {mib(budget)}")
    left = budget - weights - workspace - recurrent
    if pool_auto:
        if left >= resident_kv:
            return BudgetSplit(budget, weights, workspace, recurrent, resident_kv, None)
        if left < granule(min_pool):
            raise PoolTooSmallError(
                f"gpu_memory_mib: the budget of {mib(budget)} leaves {mib(max(left, 0))} for the "
                f"KV pool after the weights ({mib(weights)}), workspace ({mib(workspace)}) and "
                f"recurrent state ({mib(recurrent)}); the plan needs at least "
                f"{mib(granule(min_pool))} (raise the budget, or lower n_ctx or n_ubatch)")
        pool = max(left // PAGE * PAGE, min_pool)   # whole pages: its one allocation fits
        return BudgetSplit(budget, weights, workspace, recurrent, granule(pool), pool)
    kv = resident_kv if pool is None else granule(pool)
    if kv > left:
        what = "the whole KV cache" if pool is None else f"kv_pool_mib ({mib(pool)})"
        raise MemoryBudgetError(
            f"gpu_memory_mib: {what} needs {mib(kv)} but the budget of {mib(budget)} leaves "
            f"{mib(max(left, 0))} after the weights ({mib(weights)}), workspace ({mib(workspace)}) "
            f"and recurrent state ({mib(recurrent)}); use kv_pool_mib='auto' or a larger budget")
    return BudgetSplit(budget, weights, workspace, recurrent, kv, pool)


# ---------------------------------------------------------------- a Llama's budget

def plan_budget(cfg, hp: dict, tensors, n_ctx: int, device: str, *, wide_logits: bool = False,
                embeddings: bool = False, weights: int | None = None, mtp: bool = False
                ) -> tuple[BudgetSplit, int]:
    """(split, n_ubatch) for LlamaConfig cfg with cfg.gpu_memory_mib set.

    All resident when the whole cache fits, at the widest micro-batch that
    leaves room for it (ubatch.py's choices on CUDA, cfg.n_ubatch when set);
    else a bounded pool. On CUDA with one sequence its prefill workspace is the
    phase arena, which decode lends back to the KV, so every width whose pool still meets the plan's
    minimum is a candidate and the least modelled prefill time of an n_ctx prompt
    picks one (ubatch.prefill_seconds; the split's note says so); elsewhere the
    widest whose activations take at most a quarter of what the weights and
    recurrent state leave. weights: device bytes of weights already loaded (None:
    from tensors).
    """
    from ..config import requested_pool_bytes
    from .plan import kv_plan, kv_row_bytes, sequences_pool_bytes, share_bytes, whole_cache_bytes
    from .ubatch import CHOICES, RESIDENT, cheapest, matmul_flops_per_token, prefill_seconds
    budget = int(cfg.gpu_memory_mib * MIB)
    if device != "cpu" and cfg.n_cpu_moe:   # those layers' experts stay in host memory
        from ..gguf.arch_moe import host_expert
        tensors = [t for t in tensors if not host_expert(t.name, cfg.n_cpu_moe, hp["n_layer"])]
    w = weight_device_bytes(tensors) if weights is None else weights
    rbk, rbv = kv_row_bytes(hp, cfg.type_k), kv_row_bytes(hp, cfg.type_v)
    n_seq = cfg.n_seq_max
    resident = n_seq * resident_kv_bytes(hp, n_ctx, rbk, rbv)
    wide_logits = wide_logits or n_seq > 1
    rec = recurrent_device_bytes(hp)
    if mtp:   # the MTP block's own KV (mtp.c): one layer, all resident
        rec += granule(rbk * n_ctx) + granule(rbv * n_ctx)
    auto = cfg.kv_pool_mib is None or cfg.kv_pool_mib == "auto"
    # the one planner call: the minimum pool does not depend on the micro-batch
    # (kv/plan.h); a requested pool below it is refused once a split is found
    too_small: PoolTooSmallError | None = None
    # (of one sequence, within its share of the pool: what each of n_seq gets)
    try:
        plan = kv_plan(hp, n_ctx, type_k=cfg.type_k, type_v=cfg.type_v,
                       pool_bytes=None if auto else share_bytes(requested_pool_bytes(cfg), n_seq))
    except PoolTooSmallError as e:
        plan, too_small = None, e
    min_pool = 0 if plan is None else sequences_pool_bytes(plan.min_pool_bytes, n_seq)
    whole = None if plan is None else whole_cache_bytes(plan)
    pool = (None if auto else requested_pool_bytes(cfg) if plan is None   # below the minimum
            else requested_pool_bytes(cfg, whole and n_seq * whole))
    cap = lambda u: max(1, min(u, cfg.n_batch, n_ctx))   # noqa: E731  (the core's caps)
    kw = dict(logits_all=cfg.logits_all, wide_logits=wide_logits, embeddings=embeddings, mtp=mtp,
              wg_scratch=device == "cuda" and needs_wg_scratch(tensors, cfg.type_k, cfg.type_v),
              arena=device == "cuda")   # the core's default (phase_arena -1): on for CUDA
    if cfg.n_ubatch is not None:
        choices = [cap(cfg.n_ubatch)]
    elif device == "cuda":
        choices = sorted({cap(u) for u in CHOICES + (RESIDENT,)}, reverse=True)
    else:
        choices = [cap(RESIDENT)]
    if auto:   # all resident, when it fits, at the widest micro-batch that leaves room
        for u in choices:
            ws = workspace_bytes(hp, u, **kw)
            if budget - w - ws - rec >= resident:
                return split_budget(budget, w, ws, rec, resident, 0), u
    free = budget - w - rec
    err: Exception | None = None
    # the arena (one sequence only: arena.h) returns to the KV for decode
    by_cost = kw["arena"] and n_seq == 1 and len(choices) > 1
    fits: dict[int, BudgetSplit] = {}
    for i, u in enumerate(choices):
        alloc = sum(workspace_allocations(hp, u, streaming=True, row_bytes_k=rbk,
                                          row_bytes_v=rbv, **kw))
        if not by_cost and i < len(choices) - 1 and alloc > free // 4:
            continue
        ws = workspace_bytes(hp, u, streaming=True, row_bytes_k=rbk, row_bytes_v=rbv, **kw)
        try:
            split = split_budget(budget, w, ws, rec, resident, min_pool, pool, auto)
        except (MemoryBudgetError, PoolTooSmallError) as e:
            if isinstance(e, MemoryBudgetError) and w > budget:
                raise
            err = e     # the next, narrower micro-batch leaves more for the pool
            continue
        if too_small is not None:   # the planner's refusal, where its check used to run
            raise too_small
        if not by_cost:
            return split, u
        fits[u] = split
    if not fits:
        raise err
    kv_tok = (rbk + rbv) * n_layer_kv(hp)
    flops = matmul_flops_per_token(tensors)
    cost = {u: prefill_seconds(n_ctx, u, flops, n_ctx if s.pool is None else s.pool // kv_tok, kv_tok)
            for u, s in fits.items()}
    u = cheapest(cost)
    note = (f"n_ubatch {u}: the least modelled prefill of {n_ctx} tokens ("
            + ", ".join(f"{k}: {v:.1f} s" for k, v in sorted(cost.items(), reverse=True))
            + "); its workspace goes back to the KV for decode")
    return replace(fits[u], note=note), u
