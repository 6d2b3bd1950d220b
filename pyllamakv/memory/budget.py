"""gpu_memory_mib: the device memory a Llama may take, split between its parts.

A Llama's device memory is four parts: the weights, the workspace (the
context's micro-batch buffers, the phase arena, the logits rows, the KV
stream's micro-batch rows and the CUDA backend's own buffers), the recurrent
state of a hybrid, and the KV cache (its pool, or the whole cache when all of
it is resident). ``plan_budget`` gives the KV what the other three leave of the
budget.

Every figure is the core's: ``core.native_plan.memory_plan`` runs the
context's creation on a backend that records each allocation instead of
making it (native/src/memplan.c), with the CUDA backend's own buffers and the
prefill GEMM's scratch where its kernel chooser needs it, each allocation
rounded up to the driver's granularity (``granule``) so the sum bounds what
NVML sees. Nothing here restates an allocation. Two figures stay outside the
core: the CUDA runtime's own context (created before any of this, a few
hundred MiB that no setting changes: outside the budget), and
``MODULE_RESERVE``, the kernel images the runtime loads on first launch and
the decode graph's memory. On the CPU the same accounting holds the emulated
device to the same plan.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..core.native_plan import memory_plan
from ..errors import MemoryBudgetError, PoolTooSmallError

MIB = 1 << 20
SMALL = 1 << 20           # cudaMalloc: below this, sub-allocated in 512-byte steps
PAGE = 2 << 20            # at and above it, whole 2 MiB pages
MODULE_RESERVE = 64 << 20  # kernel images loaded lazily on first launch, graph memory


def granule(nbytes: int) -> int:
    """Device bytes one cudaMalloc of nbytes occupies (0 bytes: the core asks for 16);
    the rule memplan.c rounds the core's allocations by, for the pool chosen here."""
    n = max(int(nbytes), 16)
    small = -(-n // 512) * 512
    return small if small < SMALL else -(-n // PAGE) * PAGE   # what rounds up to SMALL is paged


def weight_device_bytes(tensors) -> int:
    """Device bytes of a GGUF's weights before the model is known: one allocation
    per distinct tensor (tensors: GGUFFile.tensors; two names over one data
    offset are one copy). plan_budget uses the core's figure (the tensors the
    model binds)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t.nbytes:
            seen[t.offset] = max(seen.get(t.offset, 0), t.nbytes)
    return sum(granule(n) for n in seen.values())


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
    n_cpu_moe: int | None = None   # a MoE model's layers whose experts stay in host memory
    moe_note: str = ""      # how n_cpu_moe was chosen, where the budget chose it

    @property
    def used(self) -> int:
        return self.weights + self.workspace + self.recurrent + self.kv

    def describe(self) -> str:
        m = lambda b: f"{b / MIB:.1f}"   # noqa: E731
        kv = "all resident" if self.pool is None else "pool"
        return (f"device budget {m(self.budget)} MiB: weights {m(self.weights)}, workspace "
                f"{m(self.workspace)}, recurrent state {m(self.recurrent)}, KV {m(self.kv)} "
                f"({kv}) MiB" + (f"; {self.note}" if self.note else "")
                + (f"; {self.moe_note}" if self.moe_note else ""))


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

def plan_budget(cfg, hp: dict, tensors, n_ctx: int, device: str, **kw) -> tuple[BudgetSplit, int]:
    """(split, n_ubatch) for LlamaConfig cfg with cfg.gpu_memory_mib set (kw: split_for's).

    A mixture-of-experts model with cfg.n_cpu_moe None: the fewest layers whose
    routed experts stay in host memory (the first N, llama.cpp's --n-cpu-moe)
    such that the rest fits the budget with the KV and workspace that n_ctx
    needs; the split's n_cpu_moe and moe_note say which. Placing more layers'
    experts on the host only takes weights off the device, so the least N is
    found by bisection. On the CPU the emulated device is held to the same plan.
    """
    n_layer = hp["n_layer"]
    if not hp.get("n_expert"):
        return split_for(cfg, hp, tensors, n_ctx, device, 0, **kw)
    if cfg.n_cpu_moe is not None:
        n = min(cfg.n_cpu_moe, n_layer)
        split, u = split_for(cfg, hp, tensors, n_ctx, device, n, **kw)
        return replace(split, n_cpu_moe=n), u

    def at(n: int) -> tuple[BudgetSplit, int]:
        return split_for(cfg, hp, tensors, n_ctx, device, n, **kw)
    n, best = fewest_host_layers(at, n_layer, f"gpu_memory_mib: the budget of "
                                  f"{cfg.gpu_memory_mib:.1f} MiB does not hold this model at "
                                  f"n_ctx={n_ctx}")
    split, u = best
    note = (f"n_cpu_moe {n} (chosen): " + ("every routed expert fits on the device" if not n
            else f"the routed experts of the first {n} of {n_layer} layers in host memory, "
                 f"the fewest that fit"))
    return replace(split, n_cpu_moe=n, moe_note=note), u


def fewest_host_layers(at, n_layer: int, what: str):
    """(n, at(n)) for the least n in 0..n_layer whose at(n) fits, by bisection (at: a
    function of the layers whose experts stay on the host that returns a plan or raises
    MemoryBudgetError / PoolTooSmallError, and fits for every n above one that does).
    Where even at(n_layer) does not fit, its error, prefixed with what (the budget and
    the context) and the number of layers."""
    def attempt(n: int):
        try:
            return at(n)
        except (MemoryBudgetError, PoolTooSmallError) as e:
            return e
    first = attempt(0)
    if not isinstance(first, Exception):
        return 0, first
    best = attempt(n_layer)
    if isinstance(best, Exception):
        raise type(best)(f"{what} even with the routed experts of all {n_layer} layers in "
                         f"host memory (n_cpu_moe={n_layer}): "
                         + str(best).removeprefix("gpu_memory_mib: ")) from best
    lo, hi = 0, n_layer          # at(lo) does not fit, at(hi) fits
    while hi - lo > 1:
        mid = (lo + hi) // 2
        r = attempt(mid)
        if isinstance(r, Exception):
            lo = mid
        else:
            hi, best = mid, r
    return hi, best


def split_for(cfg, hp: dict, tensors, n_ctx: int, device: str, n_cpu_moe: int, *,
              wide_logits: bool = False, embeddings: bool = False, weights: int | None = None,
              mtp: bool = False) -> tuple[BudgetSplit, int]:
    """(split, n_ubatch) for LlamaConfig cfg with the experts of the first n_cpu_moe
    layers in host memory (not counted in the weights).

    All resident when the whole cache fits, at the widest micro-batch that
    leaves room for it (ubatch.py's choices on CUDA, cfg.n_ubatch when set);
    else a bounded pool. On CUDA with one sequence its prefill workspace is the
    phase arena, which decode lends back to the KV, so every width whose pool
    still meets the plan's minimum is a candidate and the least modelled prefill
    time of an n_ctx prompt picks one (ubatch.prefill_seconds; the split's note
    says so); elsewhere the widest whose workspace takes at most a quarter of
    what the weights and recurrent state leave. Every figure is the core's
    memory plan. weights: device bytes of weights already loaded (None: the
    core's figure for tensors).
    """
    from ..config import requested_pool_bytes
    from ..gguf.arch_qwen35 import n_layer_kv
    from .plan import kv_plan, kv_row_bytes, sequences_pool_bytes, share_bytes, whole_cache_bytes
    from .ubatch import CHOICES, RESIDENT, cheapest, matmul_flops_per_token, prefill_seconds
    budget = int(cfg.gpu_memory_mib * MIB)
    n_seq = cfg.n_seq_max
    wide_logits = wide_logits or n_seq > 1
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

    def parts(u: int, kv_pool: int | None) -> tuple[int, int, int, int]:
        """(weights, workspace, recurrent, kv) device bytes of the core's plan for a
        micro-batch of u and kv_pool (None: all resident; the KV is then the planes)."""
        p = memory_plan(tensors, hp, device, n_ctx=n_ctx, n_batch=cfg.n_batch, n_ubatch=u,
                        type_k=cfg.type_k, type_v=cfg.type_v, logits_all=cfg.logits_all,
                        kv_pool_bytes=kv_pool, embeddings=embeddings, n_seq_max=n_seq,
                        mtp=mtp, gpu_kernels=cfg.gpu_kernels, n_cpu_moe=n_cpu_moe)
        kv = p.kv_device if kv_pool is None else granule(kv_pool)
        ws = MODULE_RESERVE + p.device_total - p.recurrent_device - kv
        ws += granule(p.logits_wide) if wide_logits and p.logits_wide else 0
        return (p.weights_device if weights is None else weights), ws, p.recurrent_device, kv
    if cfg.n_ubatch is not None:
        choices = [cap(cfg.n_ubatch)]
    elif device == "cuda":
        choices = sorted({cap(u) for u in CHOICES + (RESIDENT,)}, reverse=True)
    else:
        choices = [cap(RESIDENT)]
    if auto:   # all resident, when it fits, at the widest micro-batch that leaves room
        for u in choices:
            w, ws, rec, resident = parts(u, None)
            if budget - w - ws - rec >= resident:
                return split_budget(budget, w, ws, rec, resident, 0), u
    # the figures that do not depend on the pool's size, with the least pool the plan
    # accepts (a requested pool below it: planned all resident, then refused below)
    probe = min_pool or None
    err: Exception | None = None
    # the arena (one sequence only, CUDA's default: arena.h) returns to the KV for decode
    by_cost = device == "cuda" and n_seq == 1 and len(choices) > 1
    fits: dict[int, BudgetSplit] = {}
    for i, u in enumerate(choices):
        w, ws, rec, _ = parts(u, probe)
        if not by_cost and i < len(choices) - 1 and ws - MODULE_RESERVE > (budget - w - rec) // 4:
            continue
        resident = parts(u, None)[3]
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
    kv_tok = (kv_row_bytes(hp, cfg.type_k) + kv_row_bytes(hp, cfg.type_v)) * n_layer_kv(hp)
    flops = matmul_flops_per_token(tensors)
    cost = {u: prefill_seconds(n_ctx, u, flops, n_ctx if s.pool is None else s.pool // kv_tok, kv_tok)
            for u, s in fits.items()}
    u = cheapest(cost)
    note = (f"n_ubatch {u}: the least modelled prefill of {n_ctx} tokens ("
            + ", ".join(f"{k}: {v:.1f} s" for k, v in sorted(cost.items(), reverse=True))
            + "); its workspace goes back to the KV for decode")
    return replace(fits[u], note=note), u
