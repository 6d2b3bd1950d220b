"""The target's own MTP (nextn) block as a drafter (qwen35 GGUFs with nextn
tensors): the context runs the block beside the trunk (``Context(mtp=True)``,
native/src/mtp.h) and each call drafts ``num_pred_tokens`` arg-max tokens,
chained through the one block as llama.cpp and vLLM do. Drafts are point
masses for spec_decode.py's accept/reject rule.

The block runs only while a generation drafts with it: api/decoding.py
switches it on for such a generation and off for the others (``uses_mtp``).
Switched on after tokens were decoded without it, the block catches up
through prefix reuse: keep_prefix's restore point is then one where the block
is in sync, and the tokens after it are decoded again. A generation with
``reset=False`` does not truncate, so a block switched on behind drafts
nothing there (plain decoding, the same tokens)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import UnsupportedError

if TYPE_CHECKING:
    from ..core.native import Context

DEFAULT_DRAFTS = 3   # the seed's published MTP draft length


def wants_mtp(spec: Any) -> bool:
    return isinstance(spec, str) and spec == "mtp"


def uses_mtp(drafter: Any) -> bool:
    """The drafter (or the one it wraps: ``uses_mtp`` forwarded) drafts from the
    context's MTP block, which must then run beside the trunk."""
    return bool(getattr(drafter, "uses_mtp", False))


class MTPDrafter:
    """Drafts from sequence seq of ctx, the target's own context (made with
    mtp=True; each sequence has its own block): the history it is given must
    be that sequence's tokens plus the token just chosen (spec/verify.py's call)."""

    uses_mtp = True   # token_stream (api/decoding.py) switches the block on for its generations only

    def __init__(self, ctx: "Context", num_pred_tokens: int = DEFAULT_DRAFTS, seq: int = 0):
        if isinstance(num_pred_tokens, bool) or not isinstance(num_pred_tokens, int) \
                or not 1 <= num_pred_tokens <= 64:
            raise ValueError(f"num_pred_tokens must be an int in [1, 64], got {num_pred_tokens!r}")
        if ctx.model.n_nextn < 1:
            raise UnsupportedError(f"draft_model='mtp' needs a model with an MTP (nextn) block; "
                                   f"{ctx.model.file.path} has none")
        if not getattr(ctx, "mtp", False):
            raise UnsupportedError("draft_model='mtp': the context was made without its MTP block")
        n_seq = getattr(ctx, "n_seq_max", 1)
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < n_seq:
            raise ValueError(f"seq must be a sequence id in [0, {n_seq}), got {seq!r}")
        self._ctx = ctx
        self.seq = seq
        self.num_pred_tokens = num_pred_tokens

    def __call__(self, input_ids: np.ndarray, /, **kwargs: Any) -> np.ndarray:
        ids = np.asarray(input_ids).reshape(-1)
        n = self._ctx.seq_n_tokens(self.seq)
        if ids.size == 0 or ids.size != n + 1:
            return np.zeros(0, np.intc)   # not the sequence's history: nothing to say
        return self._ctx.mtp_draft(int(ids[-1]), self.num_pred_tokens,
                                   seq=self.seq).astype(np.intc)
