"""llama_cpp.mtmd_cpp's place: the multimodal (mtmd) C API has no counterpart in pyllamakv.
Importing works; every attribute raises UnsupportedFeature naming it."""
from .api.compat import unsupported_attribute

__getattr__ = unsupported_attribute(__name__, "the multimodal (mtmd) C API")
