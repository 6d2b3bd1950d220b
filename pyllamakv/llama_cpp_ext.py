"""llama_cpp.llama_cpp_ext's place: llama-cpp-python's C extension has no counterpart in pyllamakv.
Importing works; every attribute raises UnsupportedFeature naming it."""
from .api.compat import unsupported_attribute

__getattr__ = unsupported_attribute(__name__, "llama-cpp-python's C extension")
