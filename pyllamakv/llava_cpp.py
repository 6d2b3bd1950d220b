"""llama_cpp.llava_cpp's place: the LLaVA C API has no counterpart in pyllamakv.
Importing works; every attribute raises UnsupportedFeature naming it."""
from .api.compat import unsupported_attribute

__getattr__ = unsupported_attribute(__name__, "the LLaVA C API")
