"""Llama's methods on the sequences of its engine: save_state / load_state and
kv_stats of its own sequence or of another one (seq_id).
A blob saved from any sequence loads into any sequence of a context of the
same model and geometry (state.py checks it whole first).
"""
from __future__ import annotations

from functools import cached_property

from ..engine.guard import Guard, guarded
from ..engine.state import LlamaState, load_state, model_fingerprint, save_state


class SequenceMethods:
    """Mixed into Llama (needs _seq, _engine, _ctx, _model, _seed)."""

    @guarded
    def save_state(self, seq_id: int | None = None) -> LlamaState:
        """The context (seq_id: that sequence of the engine) as a LlamaState whose
        blob names this model and geometry."""
        state = save_state(self, self._sequence_of(seq_id))
        state.seed = self._seed
        return state

    @guarded
    def load_state(self, state: LlamaState, seq_id: int | None = None) -> None:
        """Replace the context (seq_id: that sequence) with a saved one; every check
        runs first (StateError)."""
        load_state(self, state, self._sequence_of(seq_id))
        if getattr(state, "seed", None) is not None:
            self._seed = state.seed

    @property
    def sequence(self):
        """The engine's sequence this Llama generates on (engine/sequence.py)."""
        return self._seq

    @property
    def engine(self):
        """The context, its sequences and their scheduler (engine/engine.py)."""
        return self._engine

    @property
    def guard(self) -> Guard:
        """The Llama's lock: features run their work under it (guard.py)."""
        return self._guard

    @property
    def gguf_file(self):
        """The model's GGUF file (typed metadata, tensors; gguf/reader.py)."""
        return self._model.file

    @cached_property
    def fingerprint(self) -> str:
        """The model's identity in saved states, computed at the first save or load."""
        return model_fingerprint(self._model.file.metadata, self._model.file.tensors)

    @guarded
    def kv_stats(self, seq_id: int | None = None) -> dict:
        """The KV cache's residency and streaming counters (see Context.kv_stats;
        seq_id, or a slot of a shared engine: that sequence's)."""
        if seq_id is None and not self._engine.shared:
            return self._ctx.kv_stats()
        return self._sequence_of(seq_id).kv_stats()

    def _sequence_of(self, seq_id):
        return self._seq if seq_id is None else self._engine.sequence(seq_id)
