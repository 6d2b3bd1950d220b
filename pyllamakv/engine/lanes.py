"""Lanes: the sequences of a Llama's context (``Llama(n_seq_max=N)``) beside
its own, and the state, statistics and batched steps of each.

Sequence 0 is the Llama's own (its History, history.py); sequences
1 .. n_seq_max - 1 each have a ``LaneHistory``: the tokens the core holds for
it and the logits of the last one. A prompt list (prompt_list.py) runs one
``Lane`` per prompt. A ``Lane`` stands in for the Llama in completion_pieces
(completion.py): its ``_generate`` samples from its own history and leaves
the token to decode pending; the first lane that needs logits runs one
``Stepper.step``, which decodes what every lane has pending in
``decode_batch`` calls (the weights read once for all of them). A sequence's
logits do not depend on what runs beside it (tests/test_multiseq.py), so each
lane's tokens are those it would sample alone.

Per-sequence state: ``save_seq_state`` / ``load_seq_state`` give and take the
checked blob of state.py (the core's per-sequence state is in the format of
its whole-context one), so a blob saved from any sequence loads into any
sequence of a context of the same model and geometry.
"""
from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np

from ..errors import ParameterError, UnsupportedError
from .guard import atomic
from .sampling import Sampler
from .state import LlamaState, _geometry, check_state, load_state, pack, save_state


class LaneHistory:
    """Tokens sequence `seq` holds (n, read by nobody but its lane) and its last logits."""

    def __init__(self, n_ctx: int, n_vocab: int) -> None:
        self.ids = np.zeros(n_ctx, np.int32)          # (n_ctx,)
        self.n = 0
        self.last = np.zeros(n_vocab, np.float32)     # (n_vocab,) after ids[n - 1]

    def input_ids(self) -> np.ndarray:
        return self.ids[:self.n]

    def scores(self) -> np.ndarray:
        return self.last[None]

    def last_logits(self) -> np.ndarray:
        return self.last


def own_sequence_history(llm) -> LaneHistory:
    """A LaneHistory copy of the Llama's own (sequence 0's) History."""
    h = LaneHistory(llm._n_ctx, llm._model.n_vocab)
    ids = llm._hist.input_ids()
    h.n = len(ids)
    h.ids[:h.n] = ids
    if h.n:
        h.last[:] = llm._hist.last_logits()
    return h


def lane_history(llm, seq: Any) -> LaneHistory:
    """Sequence seq's history (1 <= seq < n_seq_max), made empty the first time."""
    n_seq = llm.config.n_seq_max
    if isinstance(seq, bool) or not isinstance(seq, (int, np.integer)):
        raise ParameterError(f"seq_id must be an int, not {type(seq).__name__}")
    if not 0 < seq < n_seq:
        raise ParameterError(f"seq_id {seq} is outside [0, n_seq_max = {n_seq})")
    if llm.config.logits_all:
        raise UnsupportedError(f"seq_id {seq}: sequences beside the Llama's own keep the last "
                               "logits only; create the Llama with logits_all=False")
    lanes = llm.__dict__.setdefault("_lanes", {})
    if seq not in lanes:
        lanes[seq] = LaneHistory(llm._n_ctx, llm._model.n_vocab)
    return lanes[seq]


def reset_lanes(llm) -> None:
    """Empties every sequence beside the Llama's own."""
    for seq, h in llm.__dict__.get("_lanes", {}).items():
        llm._ctx.seq_reset(seq)
        h.n = 0


# ---------------------------------------------------------------- state and statistics

def save_seq_state(llm, seq: int | None) -> LlamaState:
    """Llama.save_state: the Llama's own sequence for None or 0, else sequence seq."""
    if seq in (None, 0):
        return save_state(llm)
    h = lane_history(llm, seq)
    ids, scores = h.input_ids().copy(), h.scores()[:min(h.n, 1)].copy()
    blob = pack(llm._ctx.seq_state_get(seq), model=llm._fingerprint, geometry=_geometry(llm),
                input_ids=ids, scores=scores)
    return LlamaState(ids, scores, len(ids), blob, llm._n_ctx)


def load_seq_state(llm, state: Any, seq: int | None) -> None:
    """Sequence seq (None or 0: the Llama's own) becomes state; every check runs
    before anything changes."""
    if seq in (None, 0):
        return load_state(llm, state)
    h = lane_history(llm, seq)
    kv = check_state(state, model=llm._fingerprint, geometry=_geometry(llm),
                     n_vocab=llm._model.n_vocab)
    ids, scores = np.asarray(state.input_ids), np.asarray(state.scores)

    def run() -> None:
        llm._ctx.seq_state_set(seq, kv)
        h.n = len(ids)
        h.ids[:h.n] = ids
        h.last[:] = scores[-1] if h.n else 0.0
    atomic(run)


def seq_kv_stats(llm, seq: Any) -> dict:
    """kv_stats of sequence seq: its tokens, resident and streamed chunks, bytes
    (None: the context's counters, Context.kv_stats)."""
    if seq is None:
        return llm._ctx.kv_stats()
    if seq != 0:
        lane_history(llm, seq)       # checks the id
    elif not hasattr(llm._ctx, "seq_kv_stats"):   # a slot's sequence (seq_batch.SeqContext)
        return llm._ctx.kv_stats()
    d = llm._ctx.seq_kv_stats(int(seq))
    d["n_ubatch"] = llm._ctx.n_ubatch
    return d


# ---------------------------------------------------------------- batched lanes

class Stepper:
    """Decodes what the lanes have pending, n_batch tokens a call at most."""

    def __init__(self, ctx, n_batch: int) -> None:
        self.ctx, self.n_batch = ctx, n_batch
        self.lanes: list[Lane] = []

    def step(self) -> None:
        while any(lane.pending for lane in self.lanes):
            toks: list[int] = []
            seqs: list[int] = []
            want: list[bool] = []
            took: list[tuple[Lane, int]] = []
            for lane in self.lanes:
                room = self.n_batch - len(toks)
                if not lane.pending or room == 0:
                    continue
                if lane.keep is not None:   # the prefix it keeps of what the sequence held
                    self.ctx.seq_truncate(lane.seq, lane.keep)
                    lane._hist.n, lane.keep = lane.keep, None
                k = min(room, len(lane.pending))
                toks += lane.pending[:k]
                seqs += [lane.seq] * k
                want += [False] * (k - 1) + [k == len(lane.pending)]
                took.append((lane, k))
            self.ctx.decode_batch(toks, seqs, want)   # all or nothing
            rows, r = self.ctx.logits(), 0
            for lane, k in took:
                h = lane._hist
                h.ids[h.n:h.n + k] = lane.pending[:k]
                h.n += k
                del lane.pending[:k]
                lane.stale = bool(lane.pending)   # part of a prompt: no logits yet
                if not lane.pending:
                    h.last[:] = rows[r]
                    r += 1


class Lane:
    """One sequence standing in for the Llama in completion_pieces."""

    cache = None          # no prompt cache, no speculation: plain decoding

    def __init__(self, llm, stepper: Stepper, seq: int, hist: LaneHistory) -> None:
        self._n_ctx, self.config, self.tokenizer = llm._n_ctx, llm.config, llm.tokenizer
        self.stepper, self.seq, self._hist = stepper, seq, hist
        self.pending: list[int] = []
        self.keep: int | None = None
        self.begun = False
        self.stale = False        # hist.last is not the logits after its last token
        stepper.lanes.append(self)

    def begin(self, prompt: Sequence[int]) -> None:
        """Keep the longest prefix of prompt the sequence holds (all but its last
        token at most, for its logits); the rest waits for the next step."""
        held = self._hist.input_ids()
        n = min(len(held), len(prompt))
        diff = np.nonzero(held[:n] != np.asarray(prompt[:n], np.int32))[0]
        self.keep = min(int(diff[0]) if diff.size else n, len(prompt) - 1)
        self.pending = list(prompt[self.keep:])
        self.begun = True

    def _generate(self, prompt: list[int], sampler: Sampler, **_hints) -> Iterator[int]:
        if not self.begun:
            self.begin(prompt)
        try:
            while True:
                if self.pending:
                    self.stepper.step()
                token = sampler.sample(self._hist.last, self._hist.input_ids())
                self.pending = [token]    # the next step (any lane's) decodes it
                yield token
        finally:                          # the completion ended: its last token stays out
            self.pending = []
