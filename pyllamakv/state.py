"""LlamaState (a saved context) and Timings (what the last generation cost)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(slots=True)
class LlamaState:
    """What ``Llama.save_state`` returns: the KV blob, the tokens it holds and
    the logits kept for them (every row with logits_all, else the last)."""
    input_ids: np.ndarray          # (n_tokens,) int32
    scores: np.ndarray             # (rows, n_vocab) float32
    n_tokens: int
    llama_state: bytes             # the core's KV state
    n_ctx: int = 0

    @property
    def llama_state_size(self) -> int:
        return len(self.llama_state)


@dataclass(slots=True)
class Timings:
    """Seconds and tokens spent in each stage since the last ``reset``."""
    prefill_tokens: int = 0
    prefill_s: float = 0.0
    decode_tokens: int = 0
    decode_s: float = 0.0
    sample_s: float = 0.0
    draft_s: float = 0.0              # speculative decoding (spec_decode.py):
    verify_passes: int = 0            # target passes over [token + drafts]
    drafted_tokens: int = 0           # drafts proposed to them
    accepted_tokens: int = 0          # drafts kept

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0

    @property
    def tokens_per_pass(self) -> float:
        """Tokens added to the cache per verification pass (1 + kept drafts)."""
        return self.decode_tokens / self.verify_passes if self.verify_passes else 0.0

    @property
    def prefill_tps(self) -> float:
        return self.prefill_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tps(self) -> float:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else 0.0
