"""The core's return statuses as exceptions, and ints checked for C fields:
what every caller of the core's functions needs (native.py and its mixins)."""
from __future__ import annotations

import numpy as np

from .ffi import last_error
from ..errors import ParameterError, ParameterTypeError, error_for_status


def check(status: int, what: str) -> None:
    """Raises the exception for a failure status, with the core's last message."""
    if status != 0:
        raise error_for_status(status, f"{what}: {last_error()}")


def int32(name: str, v, hi: int = 2**31 - 1) -> int:
    """v as an int for a C field of range [0, hi], or an error naming the field."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ParameterTypeError(f"{name} must be an int, not {type(v).__name__}")
    if not 0 <= v <= hi:
        raise ParameterError(f"{name} must be in [0, {hi}], got {v}")
    return int(v)
