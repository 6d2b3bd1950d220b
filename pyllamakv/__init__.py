"""pyllamakv: long-context GGUF models from Python, with a streamed KV cache.

``import pyllamakv`` stays light: the compiled core is loaded when ``Llama``
is first used.
"""
from importlib.metadata import PackageNotFoundError, version as _version

from . import errors
from .errors import LlamaKVError

try:
    __version__ = _version("pyllamakv")
except PackageNotFoundError:   # a source tree that is not installed (the version is meson.build's)
    __version__ = "0+unknown"

__all__ = ["Llama", "LlamaKVError", "errors", "__version__"]


def __getattr__(name: str):
    if name == "Llama":
        from .llama import Llama
        return Llama
    raise AttributeError(f"module 'pyllamakv' has no attribute {name!r}")
