"""Hyper-parameters: the core's model parameters read from GGUF metadata.

``model_params`` maps a file's ``{arch}.*`` keys to the fields of the core's
``lkv_model_params``, each read with its expected type and range, checks
that they agree with each other, with the vocab and with the shape of every
tensor the forward pass uses. Every refusal names the key or the tensor.

An architecture is a row of ``ARCH_TABLE``: the core's id, a hook that reads
its own keys (``params``) and the tensors each of its layers adds
(``layer_tensors``). ``ARCHS`` maps names to core ids.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import ShapeError
from .reader import GGUFError, GGUFFile
from .vocab import check_vocab_rows

INT32_MAX = (1 << 31) - 1
FLOAT32_MAX = 3.4028234663852886e38
_REQUIRED = object()


class Keys:
    """Typed, range-checked reads of one file's ``{arch}.*`` metadata."""

    def __init__(self, f: GGUFFile):
        self.f, self.arch = f, f.architecture

    def _fail(self, key: str, why: str) -> GGUFError:
        return GGUFError(f"{self.f.path}: metadata key {key!r} {why}")

    def _found(self, key: str, v: Any) -> str:
        t = self.f.value_types.get(key) or type(v).__name__
        return f"{t} {v!r}" if not isinstance(v, list) else t

    def _get(self, suffix: str, default: Any) -> tuple[str, Any]:
        key = f"{self.arch}.{suffix}"
        v = self.f.metadata.get(key, default)
        if v is _REQUIRED:
            raise self._fail(key, "is missing")
        return key, v

    def int(self, suffix: str, default: Any = _REQUIRED, lo: int = 1,
            hi: int = INT32_MAX) -> int:
        key, v = self._get(suffix, default)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self._fail(key, f"must be an integer in [{lo}, {hi}], not {self._found(key, v)}")
        if not lo <= v <= hi:
            raise self._fail(key, f"= {v} is out of range [{lo}, {hi}]")
        return v

    def float(self, suffix: str, default: Any = _REQUIRED) -> float:
        """A finite number > 0 that a float32 holds."""
        key, v = self._get(suffix, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self._fail(key, f"must be a number, not {self._found(key, v)}")
        if not (math.isfinite(v) and 0 < v <= FLOAT32_MAX):
            raise self._fail(key, f"= {v} is out of range (0, {FLOAT32_MAX:g}]")
        return float(v)

    def str(self, suffix: str, default: Any = _REQUIRED) -> str | None:
        key, v = self._get(suffix, default)
        if v is not None and not isinstance(v, str):
            raise self._fail(key, f"must be a string, not {self._found(key, v)}")
        return v


# ---------------------------------------------------------------- architectures

def _qkv_biases(hp: dict) -> dict[str, tuple[int, ...]]:
    q, kv = hp["n_head"] * hp["head_dim"], hp["n_head_kv"] * hp["head_dim"]
    return {"attn_q.bias": (q,), "attn_k.bias": (kv,), "attn_v.bias": (kv,)}


def _qk_norms(hp: dict) -> dict[str, tuple[int, ...]]:
    return {"attn_q_norm.weight": (hp["head_dim"],), "attn_k_norm.weight": (hp["head_dim"],)}


@dataclass(frozen=True, slots=True)
class Arch:
    core_id: int                                             # the core's lkv_arch
    params: Callable[[Keys, dict], None] | None = None       # reads its own keys into hp
    layer_tensors: Callable[[dict], dict[str, tuple[int, ...]]] | None = None
    core_checks_layers: bool = False    # layers of several kinds: the core binds and checks them
    moe: bool = False                   # routed experts: feed_forward_length is optional


def _qwen35(k: Keys, hp: dict) -> None:
    from .arch_qwen35 import qwen35_params
    hp.update(qwen35_params(k.f))


def _gemma3(k: Keys, hp: dict) -> None:
    from .arch_gemma3 import gemma3_params
    hp.update(gemma3_params(k.f, hp))


def _moe(k: Keys, hp: dict) -> None:
    from .arch_moe import moe_params
    hp.update(moe_params(k.f, hp))


def _qwen35moe(k: Keys, hp: dict) -> None:
    _qwen35(k, hp)
    _moe(k, hp)


def _gemma3_tensors(hp: dict) -> dict[str, tuple[int, ...]]:
    from .arch_gemma3 import layer_tensors
    return layer_tensors(hp)


ARCH_TABLE: dict[str, Arch] = {
    "llama": Arch(0), "mistral": Arch(0),
    "qwen2": Arch(1, layer_tensors=_qkv_biases),
    "qwen3": Arch(2, layer_tensors=_qk_norms),
    "qwen35": Arch(3, params=_qwen35, core_checks_layers=True),
    "gemma3": Arch(4, params=_gemma3, layer_tensors=_gemma3_tensors),
    "qwen3moe": Arch(5, params=_moe, core_checks_layers=True, moe=True),
    "qwen35moe": Arch(6, params=_qwen35moe, core_checks_layers=True, moe=True),
}
ARCHS = {name: a.core_id for name, a in ARCH_TABLE.items()}


# ---------------------------------------------------------------- parameters

def model_params(f: GGUFFile) -> dict[str, Any]:
    """The core's model parameters read from GGUF metadata, as a dict; checked
    against each other, the vocab and the tensors' shapes."""
    arch = f.architecture
    if arch not in ARCH_TABLE:
        raise GGUFError(f"{f.path}: unsupported architecture {arch!r}; supported: "
                        f"{', '.join(sorted(ARCH_TABLE))}")
    k = Keys(f)
    if isinstance(f.arch_key("attention.head_count"), list):
        raise GGUFError(f"{f.path}: per-layer head counts ({arch}.attention.head_count) are "
                        "not supported")
    n_embd = k.int("embedding_length")
    n_head = k.int("attention.head_count")
    n_head_kv = k.int("attention.head_count_kv", n_head, hi=n_head)
    if n_head % n_head_kv:
        raise GGUFError(f"{f.path}: {arch}.attention.head_count {n_head} is not a multiple of "
                        f"{arch}.attention.head_count_kv {n_head_kv}")
    if f"{arch}.attention.key_length" not in f.metadata and n_embd % n_head:
        raise GGUFError(f"{f.path}: {arch}.embedding_length {n_embd} is not a multiple of "
                        f"{arch}.attention.head_count {n_head} and "
                        f"{arch}.attention.key_length is absent")
    head_dim = k.int("attention.key_length", n_embd // n_head)
    v_dim = k.int("attention.value_length", head_dim)
    if v_dim != head_dim:
        raise GGUFError(f"{f.path}: {arch}.attention.value_length {v_dim} differs from "
                        f"{arch}.attention.key_length {head_dim} (not supported)")
    rope_dim = k.int("rope.dimension_count", head_dim, lo=2, hi=head_dim)
    if rope_dim % 2:
        raise GGUFError(f"{f.path}: {arch}.rope.dimension_count {rope_dim} must be even")
    scale = 1.0
    if k.str("rope.scaling.type", None) == "linear":
        scale = 1.0 / k.float("rope.scaling.factor")
    embd = _tensor(f, "token_embd.weight")
    n_vocab = embd.shape[1] if len(embd.shape) > 1 else 1
    if n_vocab > INT32_MAX:
        raise ShapeError(f"{f.path}: tensor 'token_embd.weight' has {n_vocab} rows, over "
                         f"{INT32_MAX}")
    if k.int("vocab_size", n_vocab) != n_vocab:
        raise GGUFError(f"{f.path}: metadata key '{arch}.vocab_size' = "
                        f"{f.arch_key('vocab_size')} differs from the {n_vocab} rows of "
                        "tensor 'token_embd.weight'")
    # an MoE model may have no dense FFN (0: its expert widths decide, arch_moe.py)
    n_ff = k.int("feed_forward_length", 0, lo=0) if ARCH_TABLE[arch].moe else \
        k.int("feed_forward_length")
    hp = dict(
        arch=ARCH_TABLE[arch].core_id, n_vocab=n_vocab, n_embd=n_embd,
        n_layer=k.int("block_count"), n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim,
        n_ff=n_ff, n_ctx_train=k.int("context_length", 0, lo=0),
        rope_dim=rope_dim, rms_eps=k.float("attention.layer_norm_rms_epsilon", 1e-5),
        rope_freq_base=k.float("rope.freq_base", 10000.0), rope_freq_scale=scale)
    if ARCH_TABLE[arch].params:
        ARCH_TABLE[arch].params(k, hp)
    check_vocab_rows(f.metadata, n_vocab, f"{f.path}: ")
    check_shapes(f, hp)
    return hp


# ---------------------------------------------------------------- tensor shapes

def _tensor(f: GGUFFile, name: str):
    t = f.tensor(name)
    if t is None:
        raise ShapeError(f"{f.path}: missing tensor {name!r}")
    return t


def _strip(shape) -> tuple[int, ...]:
    s = tuple(shape)
    while len(s) > 1 and s[-1] == 1:
        s = s[:-1]
    return s


def expected_shapes(arch: str, hp: dict, layer: int | None):
    """(name, ggml shape, required) of the tensors outside the layers
    (layer None) or of one layer."""
    E, F, V = hp["n_embd"], hp["n_ff"], hp["n_vocab"]
    Q, KV = hp["n_head"] * hp["head_dim"], hp["n_head_kv"] * hp["head_dim"]
    if layer is None:
        return [("token_embd.weight", (E, V), True), ("output_norm.weight", (E,), True),
                ("output.weight", (E, V), False), ("rope_freqs.weight", (hp["rope_dim"] // 2,),
                                                   False)]
    shapes = {"attn_norm.weight": (E,), "attn_q.weight": (E, Q), "attn_k.weight": (E, KV),
              "attn_v.weight": (E, KV), "attn_output.weight": (Q, E), "ffn_norm.weight": (E,),
              "ffn_gate.weight": (E, F), "ffn_up.weight": (E, F), "ffn_down.weight": (F, E)}
    extra = ARCH_TABLE[arch].layer_tensors
    if extra:
        shapes.update(extra(hp))
    return [(f"blk.{layer}.{n}", s, True) for n, s in shapes.items()]


def check_shapes(f: GGUFFile, hp: dict) -> None:
    """Every tensor the forward pass uses is present with its expected shape
    (ShapeError naming it). Types are the core's to check."""
    layers = () if ARCH_TABLE[f.architecture].core_checks_layers else range(hp["n_layer"])
    for layer in itertools.chain((None,), layers):   # lazily: n_layer may lie
        for name, shape, required in expected_shapes(f.architecture, hp, layer):
            t = f.tensor(name)
            if t is None:
                if required:
                    raise ShapeError(f"{f.path}: missing tensor {name!r}")
                continue
            if _strip(t.shape) != _strip(shape):
                raise ShapeError(f"{f.path}: tensor {name!r} has shape {list(t.shape)}, "
                                 f"expected {list(shape)}")
