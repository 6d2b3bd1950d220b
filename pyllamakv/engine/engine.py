"""Engine: one context, its sequences and the scheduler that steps them.

    engine = open_engine(path, LlamaConfig(n_ctx=2048, n_seq_max=4), shared=True)
    seq = engine.open()                           # the next sequence not handed out
    seq.eval(tokens); seq.last_logits()

open.py's ``open_engine`` plans and makes the context from load-time settings
(device, budget, pool, n_ubatch; the model loaded, or a loaded one shared) and
records the plan (``engine.plan``); ``Engine(n).open(model, n_ctx=...)`` makes
one from Context's own arguments.

``Llama`` is a facade over an engine and one of its sequences (its own
engine's sequence 0; a server slot's: a sequence of the one shared engine).
A prompt list or ``n`` choices take more sequences of the Llama's engine.
The context is made once (``start``, or the first ``open``): the pool and the
threads given are the whole context's (one pool for every sequence, given once; a server's
slots: its --kv-pool-mib). The context is freed when the last sequence
handed out is released.
"""
from __future__ import annotations

import threading

from ..errors import ParameterError, UnsupportedError
from .scheduler import Scheduler
from .sequence import Sequence


class Engine:
    def __init__(self, n_seq: int = 1, shared: bool = False) -> None:
        if isinstance(n_seq, bool) or not isinstance(n_seq, int) or n_seq < 1:
            raise ParameterError(f"n_seq must be an int >= 1, got {n_seq!r}")
        self.n_seq, self.shared = n_seq, shared
        self.ctx = self.scheduler = self.model = None
        self.plan = None            # open.ContextPlan where open_engine made the context
        self._owns_model = False    # close the model with the context (open_engine loaded it)
        self._lock = threading.Lock()
        self._seqs: dict[int, Sequence] = {}
        self._open: set[int] = set()
        self.n_ctx = self.n_batch = 0

    def start(self, model, plan=None, owns_model: bool = False, **kw) -> None:
        """Make the context over model with Context's arguments kw (n_seq_max: the
        engine's); plan: what decided them (open.py). An engine that has its
        context already keeps it (a shared engine taken by a second Llama)."""
        with self._lock:
            self._start(model, plan, owns_model, kw)

    def _start(self, model, plan, owns_model: bool, kw: dict) -> None:
        from ..core.native import Context
        if self.ctx is not None:
            return
        if self.n_seq > 1:
            kw["n_seq_max"] = self.n_seq
        self.ctx = Context(model, **kw)
        self.model, self.plan, self._owns_model = model, plan, owns_model
        self.n_ctx = kw.get("n_ctx", 4096)
        self.n_batch = min(kw.get("n_batch", 512), self.n_ctx)
        self.scheduler = Scheduler(self.ctx, self.n_batch)

    def open(self, model=None, keep_all: bool | None = None, **kw) -> Sequence:
        """The next sequence not handed out (the first call, without start, makes
        the context from model and kw)."""
        with self._lock:
            if self.ctx is None:
                if model is None:
                    raise ParameterError("the engine has no context yet: give open the "
                                         "model and Context's arguments, or open_engine")
                self._start(model, None, False, kw)
            free = [i for i in range(self.n_seq) if i not in self._open]
            if not free:
                raise ParameterError(f"the engine has {self.n_seq} sequences, all given")
            self._open.add(free[0])
            return self.sequence(free[0], keep_all)

    def sequence(self, seq_id, keep_all: bool | None = None) -> Sequence:
        """Sequence seq_id (0 <= seq_id < n_seq), made the first time."""
        if isinstance(seq_id, bool) or not isinstance(seq_id, int):
            try:
                seq_id = int(seq_id.__index__())
            except (AttributeError, TypeError):
                raise ParameterError(f"seq_id must be an int, not {type(seq_id).__name__}")
        if not 0 <= seq_id < self.n_seq:
            raise ParameterError(f"seq_id {seq_id} is outside [0, n_seq_max = {self.n_seq})")
        seq = self._seqs.get(seq_id)
        if seq is None:
            keep_all = self.ctx.logits_all if keep_all is None else keep_all
            if keep_all and seq_id:
                raise UnsupportedError(f"seq_id {seq_id}: sequences beside the Llama's own "
                                       "keep the last logits only; create the Llama with "
                                       "logits_all=False")
            seq = self._seqs[seq_id] = Sequence(self.ctx, self.scheduler, seq_id, self.n_ctx,
                                                self.n_batch, keep_all)
        return seq

    def others(self, seq: Sequence) -> list[Sequence]:
        """The sequences made so far beside seq."""
        return [s for i, s in sorted(self._seqs.items()) if s is not seq]

    def release(self, seq: Sequence) -> None:
        """seq's owner is done; the last release frees the context."""
        with self._lock:
            if seq.id not in self._open:
                return
            self._open.discard(seq.id)
            if not self._open:
                self._free()

    def close(self) -> None:
        """Free the context (and the model where open_engine loaded it; idempotent)."""
        with self._lock:
            self._open.clear()
            self._free()

    def _free(self) -> None:
        if self.ctx is not None:
            self.ctx.close()
        if self._owns_model and self.model is not None:
            self.model.close()
