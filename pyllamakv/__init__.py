"""pyllamakv: long-context GGUF models from Python, with a streamed KV cache.

``import pyllamakv`` stays light: the compiled core is loaded when ``Llama``
is first used, and every other name below is imported when first asked for.

The package has llama_cpp's (llama-cpp-python's) layout, so ``import llama_cpp``
becomes ``import pyllamakv``: ``Llama``, ``LlamaGrammar``, ``LlamaRAMCache``,
``LlamaState``, ``LogitsProcessorList``, the llama_types TypedDicts, llama.cpp's
constants (``LLAMA_POOLING_TYPE_MEAN``, ``GGML_TYPE_Q8_0``, ...) at the top, and
the modules ``llama_grammar``, ``llama_cache``, ``llama_types``,
``llama_chat_format``, ``llama_speculative``, ``llama_tokenizer``, ``llama_cpp``.
"""
from importlib import import_module
from importlib.metadata import PackageNotFoundError, version as _version

from . import errors
from .errors import LlamaKVError

try:
    __version__ = _version("pyllamakv")
except PackageNotFoundError:   # a source tree that is not installed (the version is meson.build's)
    __version__ = "0+unknown"

# name -> the module (relative to this package) that defines it
_LAZY = {
    "Llama": ".llama", "LlamaGrammar": ".llama_grammar", "GrammarError": ".llama_grammar",
    "LlamaCache": ".llama_cache", "LlamaRAMCache": ".llama_cache",
    "LlamaDiskCache": ".llama_cache", "BaseLlamaCache": ".llama_cache",
    "LlamaState": ".engine.state", "LogitsProcessor": ".engine.processors",
    "LogitsProcessorList": ".engine.processors", "StoppingCriteria": ".engine.processors",
    "StoppingCriteriaList": ".engine.processors",
    "MinTokensLogitsProcessor": ".engine.processors",
    "LlamaTokenizer": ".llama_tokenizer", "LlamaHFTokenizer": ".llama_tokenizer",
    "UnsupportedFeature": ".api.compat",
}
_MODULES = ("llama_grammar", "llama_cache", "llama_types", "llama_chat_format",
            "llama_speculative", "llama_tokenizer", "llama_cpp", "llama", "server")
_MODULES += ("mtmd_cpp", "llava_cpp", "llama_cpp_ext")   # stand-ins (UnsupportedFeature)
_ABSENT = {"_internals": "llama.cpp's handles (llama_cpp._internals)"}

__all__ = ["LlamaKVError", "errors", "__version__", *_LAZY, *_MODULES]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    if name in _MODULES:
        return import_module("." + name, __name__)
    if name in _ABSENT:
        from .api.compat import absent_module
        return absent_module(f"{__name__}.{name}", _ABSENT[name])
    if name.startswith(("LLAMA_", "GGML_", "llama_", "ggml_")):
        return getattr(import_module(".llama_cpp", __name__), name)
    if name[:1].isupper():
        types = import_module(".llama_types", __name__)
        if hasattr(types, name):
            return getattr(types, name)
    raise AttributeError(f"module 'pyllamakv' has no attribute {name!r}")
