"""Checks of single parameter values, for the config dataclasses' __post_init__.

Each raises ParameterTypeError (a TypeError) for a value of the wrong type and
ParameterError (a ValueError) for one outside its range; both messages name
the parameter and what it accepts. Booleans are not numbers here.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .errors import ParameterError, ParameterTypeError

INT32_MAX = 2**31 - 1


def is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def is_real(x: Any) -> bool:
    return (isinstance(x, (int, float, np.integer, np.floating))
            and not isinstance(x, (bool, np.bool_)))


def _range(lo, hi) -> str:
    if hi is None:
        return f">= {lo}"
    return f"in [{lo}, {hi}]"


def check_int(name: str, v: Any, lo: int = 0, hi: int | None = INT32_MAX) -> int:
    """v as an int in [lo, hi]."""
    if not is_int(v):
        raise ParameterTypeError(f"{name} must be an int {_range(lo, hi)}, "
                                 f"not {type(v).__name__} ({v!r})")
    if v < lo or (hi is not None and v > hi):
        raise ParameterError(f"{name} must be an int {_range(lo, hi)}, got {v}")
    return int(v)


def check_real(name: str, v: Any, lo: float = -math.inf, hi: float = math.inf, *,
               lo_open: bool = False) -> float:
    """v as a finite float in [lo, hi] (or (lo, hi] with lo_open)."""
    if not is_real(v):
        raise ParameterTypeError(f"{name} must be a number, not {type(v).__name__} ({v!r})")
    f = float(v)
    low_ok = f > lo if lo_open else f >= lo
    if not math.isfinite(f) or not low_ok or f > hi:
        where = ("a finite number" if lo == -math.inf and hi == math.inf else
                 f"a number in {'(' if lo_open else '['}{lo}, {hi}]")
        raise ParameterError(f"{name} must be {where}, got {v!r}")
    return f


def check_bool(name: str, v: Any) -> bool:
    if not isinstance(v, (bool, np.bool_)):
        raise ParameterTypeError(f"{name} must be True or False, not {type(v).__name__} ({v!r})")
    return bool(v)


def check_choice(name: str, v: Any, choices: tuple) -> Any:
    if not isinstance(v, str) or v not in choices:
        raise ParameterError(f"{name} must be one of {', '.join(map(repr, choices))}, got {v!r}")
    return v


GPU_KERNELS = ("exact", "fast")


def check_gpu_kernels(v: Any) -> str:
    """gpu_kernels, for LlamaConfig and core.native.Context (which takes it directly)."""
    if v not in GPU_KERNELS:
        raise ParameterError(f"gpu_kernels must be 'exact' (bit-identical with the CPU) or "
                             f"'fast', got {v!r}")
    return v
