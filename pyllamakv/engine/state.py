"""LlamaState (a saved context), its checked blob, and Timings.

``LlamaState`` keeps llama-cpp-python's fields. Its ``llama_state`` bytes are
a versioned blob that names what it belongs to:

    magic "PLKVSTAT" | u32 version | u32 header length | header (JSON) |
    the core's KV state | sha256 of everything before it

The header holds the model's fingerprint (a hash of its tensor layout and
metadata, computed once at load), the context geometry (n_ctx, KV types, layer
and head counts, n_vocab, logits_all), n_tokens, and sha256 digests of the
input_ids and scores saved beside the blob. ``check_state`` validates all of
it, and the Python fields against it, before anything is replaced. The
checksum is no secret (anyone can recompute it), so the KV rows themselves
are checked too: a blob whose K or V rows (or saved logits) hold NaN or inf
is refused, as the core would compute with them silently.
"""
from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import StateError
from ..gguf.weight_check import raw_nonfinite

MAGIC = b"PLKVSTAT"
VERSION = 1
_HEAD = struct.Struct("<8sII")
_DIGEST = 32
# the core's KV state header (native/src/context.c, state_header): magic, n_tokens,
# n_layer, type_k, type_v, padding, row_bytes_k, row_bytes_v, recur_bytes
_KV_HEAD = struct.Struct("<I4i4x3q")


def _kv_nonfinite(kv: memoryview) -> str | None:
    """'K' or 'V' if those rows of the core's state hold NaN / inf; None if
    not (or if the layout is not the one described: the core refuses it)."""
    if len(kv) < _KV_HEAD.size:
        return None
    _, n_tok, n_layer, tk, tv, rbk, rbv, _ = _KV_HEAD.unpack_from(kv)
    if min(n_tok, n_layer, rbk, rbv) <= 0 or len(kv) < _KV_HEAD.size + n_layer * n_tok * (rbk + rbv):
        return None
    data = np.frombuffer(kv, np.uint8, n_layer * n_tok * (rbk + rbv), _KV_HEAD.size)
    layers = data.reshape(n_layer, n_tok * (rbk + rbv))
    for name, rows, t in (("K", layers[:, :n_tok * rbk], tk), ("V", layers[:, n_tok * rbk:], tv)):
        for layer in rows:
            if raw_nonfinite(layer, t):
                return name
    return None


@dataclass(slots=True)
class LlamaState:
    """What ``Llama.save_state`` returns: the KV blob, the tokens it holds and
    the logits kept for them (every row with logits_all, else the last)."""
    input_ids: np.ndarray          # (n_tokens,) int32
    scores: np.ndarray             # (rows, n_vocab) float32
    n_tokens: int
    llama_state: bytes             # the checked blob (see the module docstring)
    n_ctx: int = 0
    seed: int | None = None        # the Llama's sampling seed when saved (set_seed)

    @property
    def llama_state_size(self) -> int:
        return len(self.llama_state)


# ---------------------------------------------------------------- model fingerprint

def _feed(h, value: Any) -> None:
    if isinstance(value, list):
        h.update(b"[%d" % len(value))
        if value and all(isinstance(v, str) for v in value):
            h.update("\0".join(value).encode("utf-8", "surrogatepass"))
        else:
            h.update(repr(value).encode())
        h.update(b"]")
    else:
        h.update(repr((type(value).__name__, value)).encode("utf-8", "surrogatepass"))


def model_fingerprint(metadata: dict, tensors: list) -> str:
    """sha256 over the metadata keys and values, each tensor's name, type,
    shape and offset, and a sample of its bytes (the first and last 32; not
    the weights as a whole): cheap, and different for two models that differ
    in layout, description, or (almost surely) weights of the same shape."""
    h = hashlib.sha256()
    for key in sorted(metadata):
        h.update(key.encode() + b"=")
        _feed(h, metadata[key])
        h.update(b"\n")
    base = min((t.data.__array_interface__["data"][0] for t in tensors if t.nbytes), default=0)
    for t in tensors:
        off = getattr(t, "offset", None)
        if off is None:
            off = t.data.__array_interface__["data"][0] - base if t.nbytes else 0
        h.update(f"{t.name}|{t.type}|{tuple(t.shape)}|{off}|{t.nbytes}|".encode())
        if t.nbytes:
            h.update(bytes(t.data[:32]) + bytes(t.data[-32:]))
    return h.hexdigest()


# ---------------------------------------------------------------- the blob

def _digest(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a)
    return hashlib.sha256(str((a.dtype.str, a.shape)).encode() + a.tobytes()).hexdigest()


def pack(kv: bytes, *, model: str, geometry: dict, input_ids: np.ndarray,
         scores: np.ndarray) -> bytes:
    header = json.dumps({"model": model, "geometry": geometry, "n_tokens": len(input_ids),
                         "kv_bytes": len(kv), "input_ids": _digest(input_ids),
                         "scores": _digest(scores)}, sort_keys=True).encode()
    body = _HEAD.pack(MAGIC, VERSION, len(header)) + header + kv
    return body + hashlib.sha256(body).digest()


def _unpack(blob: Any) -> tuple[dict, memoryview]:
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise StateError(f"llama_state must be bytes, not {type(blob).__name__}")
    mv = memoryview(blob).cast("B")
    if len(mv) < _HEAD.size + _DIGEST:
        raise StateError(f"the state blob is {len(mv)} bytes: too short to be a saved state")
    magic, version, hlen = _HEAD.unpack_from(mv)
    if magic != MAGIC:
        raise StateError("not a pyllamakv state blob (bad magic)")
    if version != VERSION:
        raise StateError(f"state blob version {version}; this pyllamakv reads version {VERSION}")
    if _HEAD.size + hlen + _DIGEST > len(mv):
        raise StateError("the state blob is truncated (its header runs past its end)")
    if hashlib.sha256(mv[:-_DIGEST]).digest() != bytes(mv[-_DIGEST:]):
        raise StateError("the state blob's checksum does not match: it is damaged")
    try:
        header = json.loads(bytes(mv[_HEAD.size:_HEAD.size + hlen]))
    except ValueError as e:
        raise StateError(f"the state blob's header is unreadable: {e}") from None
    kv = mv[_HEAD.size + hlen:-_DIGEST]
    if not isinstance(header, dict) or header.get("kv_bytes") != len(kv):
        raise StateError("the state blob's header does not describe its KV bytes")
    return header, kv


def check_state(state: Any, *, model: str, geometry: dict, n_vocab: int) -> memoryview:
    """The core's KV bytes of state, after every check; raises StateError."""
    if not isinstance(state, LlamaState):
        raise StateError(f"load_state takes a LlamaState, not {type(state).__name__}")
    header, kv = _unpack(state.llama_state)
    if header.get("model") != model:
        raise StateError("the state was saved from a different model (its fingerprint differs)")
    saved = header.get("geometry", {})
    diff = [f"{k}: saved {saved.get(k)!r}, here {v!r}" for k, v in geometry.items()
            if saved.get(k) != v]
    if diff:
        raise StateError("the state does not fit this context: " + "; ".join(diff))
    n = state.n_tokens
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n != header["n_tokens"]:
        raise StateError(f"state.n_tokens={n!r} but the blob holds {header['n_tokens']} tokens")
    ids, scores = np.asarray(state.input_ids), np.asarray(state.scores)
    if ids.shape != (n,) or ids.dtype != np.int32 or _digest(ids) != header["input_ids"]:
        raise StateError(f"state.input_ids ({ids.dtype}{list(ids.shape)}) are not the "
                         f"{n} tokens the blob was saved with")
    rows = n if geometry.get("logits_all") else min(n, 1)
    if (scores.shape != (rows, n_vocab) or scores.dtype != np.float32
            or _digest(scores) != header["scores"]):
        raise StateError(f"state.scores ({scores.dtype}{list(scores.shape)}) are not the "
                         f"logits the blob was saved with ({rows} x {n_vocab} float32)")
    if np.isnan(scores).any():
        raise StateError("state.scores hold NaN: the state is damaged")
    bad = _kv_nonfinite(kv)
    if bad is not None:
        raise StateError(f"the state's {bad} cache rows hold NaN or infinite values: "
                         "the state is damaged")
    return kv


# ---------------------------------------------------------------- Llama's save / load

def _geometry(llm) -> dict:
    from ..core.native import type_id
    hp = llm.engine.ctx.model.hparams
    return {"n_ctx": llm.n_ctx(), "n_vocab": hp["n_vocab"], "n_layer": hp["n_layer"],
            "n_head_kv": hp["n_head_kv"], "head_dim": hp["head_dim"],
            "type_k": type_id(llm.config.type_k), "type_v": type_id(llm.config.type_v),
            "logits_all": llm.config.logits_all}


def save_state(llm, seq) -> LlamaState:
    """Sequence seq (engine/sequence.py) of llm's engine as a checked state."""
    ids = seq.input_ids().copy()
    scores = seq.scores()
    scores = (scores if seq.keep_all else scores[:min(len(ids), 1)]).copy()
    blob = pack(seq.state_get(), model=llm.fingerprint, geometry=_geometry(llm),
                input_ids=ids, scores=scores)
    return LlamaState(ids, scores, len(ids), blob, llm.n_ctx())


def load_state(llm, state: Any, seq) -> None:
    """Sequence seq becomes state; every check runs before anything changes."""
    kv = check_state(state, model=llm.fingerprint, geometry=_geometry(llm),
                     n_vocab=llm.n_vocab())
    seq.restore(kv, np.asarray(state.input_ids), np.asarray(state.scores))


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

    def add(self, stage: str, seconds: float, tokens: int) -> None:
        """Count tokens and seconds for stage "prefill" or "decode"."""
        if stage == "prefill":
            self.prefill_s += seconds
            self.prefill_tokens += tokens
        else:
            self.decode_s += seconds
            self.decode_tokens += tokens

    @property
    def prefill_tps(self) -> float:
        return self.prefill_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tps(self) -> float:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else 0.0
