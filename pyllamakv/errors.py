"""Exceptions raised for the core's failure statuses.

Each status maps to a class that also derives from the matching builtin
(ValueError for bad input, MemoryError for allocation failures, RuntimeError
for device failures), so callers can catch either.
"""
from __future__ import annotations


class LlamaKVError(Exception):
    """Base of every error the core reports."""

    status = 0


class InvalidArgumentError(LlamaKVError, ValueError):
    status = 1


class OutOfMemoryError(LlamaKVError, MemoryError):
    status = 2


class UnsupportedError(LlamaKVError, ValueError):
    status = 3


class ShapeError(LlamaKVError, ValueError):
    status = 4


class ContextFullError(LlamaKVError, ValueError):
    status = 5


class DeviceError(LlamaKVError, RuntimeError):
    status = 6


class DeadContextError(LlamaKVError, RuntimeError):
    status = 7


class PoolTooSmallError(LlamaKVError, ValueError):
    status = 8


class DeviceMemoryError(LlamaKVError, MemoryError):
    status = 9


class InternalError(LlamaKVError, RuntimeError):
    status = 10


class AbortedError(LlamaKVError, RuntimeError):
    """A decode stopped by Context.abort(); the cache is as it was before it."""
    status = 11


# ---- errors of the Python layer (no core status)

class ParameterTypeError(LlamaKVError, TypeError, ValueError):
    """A parameter or argument of the wrong type; the message names it. A
    TypeError, and a ValueError too for callers that caught bad values as one
    (as numpy's AxisError is both a ValueError and an IndexError)."""


class ParameterError(InvalidArgumentError):
    """A parameter or argument outside its allowed range; the message names both."""


class ClosedError(LlamaKVError, ValueError):
    """A call on a Llama, Model or Context after close()."""


class StateError(LlamaKVError, ValueError):
    """A saved state that does not belong to this model and context, or is damaged."""


class ModelFileChangedError(LlamaKVError, RuntimeError):
    """The mapped model file was truncated or overwritten on disk after it was
    loaded (gguf/reader.py: reading on would crash with SIGBUS or mix weights)."""


class StreamExpiredError(LlamaKVError, RuntimeError):
    """A stream left idle while another thread waited for its Llama was
    closed for it (engine/guard.py: STREAM_IDLE_S); its next item raises this."""


class MemoryBudgetError(LlamaKVError, ValueError):
    """gpu_memory_mib is too small for the parts that must fit in it (budget.py)."""


_BY_STATUS = {c.status: c for c in (
    InvalidArgumentError, OutOfMemoryError, UnsupportedError, ShapeError, ContextFullError,
    DeviceError, DeadContextError, PoolTooSmallError, DeviceMemoryError, InternalError,
    AbortedError)}


def error_for_status(status: int, message: str) -> LlamaKVError:
    cls = _BY_STATUS.get(status, InternalError)
    return cls(message)


class ForeignLibraryError(LlamaKVError, RuntimeError):
    """A third-party native library (tokenizers, llguidance, jinja2's C parts)
    failed or panicked on this input; the message names the library and the step.
    Raised where the library is called, so that no panic (a BaseException in
    pyo3 libraries) crosses into code that catches only Exception."""


# exceptions that stop the program and must pass through untouched
_PASS_THROUGH = (KeyboardInterrupt, SystemExit, GeneratorExit, LlamaKVError)


class contained:
    """``with contained("tokenizers", "encoding the prompt"):`` turns whatever the
    library raises (a pyo3 ``PanicException`` too) into ForeignLibraryError;
    the project's own errors and interrupts pass through; MemoryError becomes
    OutOfMemoryError."""

    __slots__ = ("library", "step")

    def __init__(self, library: str, step: str) -> None:
        self.library, self.step = library, step

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None or isinstance(exc, _PASS_THROUGH):
            return False
        if isinstance(exc, MemoryError):
            raise OutOfMemoryError(f"{self.library} ran out of memory {self.step}") from exc
        raise ForeignLibraryError(f"{self.library} failed {self.step}: "
                                  f"{type(exc).__name__}: {str(exc)[:300]}") from exc
