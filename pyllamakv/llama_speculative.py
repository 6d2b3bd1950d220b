"""llama_cpp.llama_speculative: drafters for speculative decoding (spec/)."""
from .spec.lookup import LlamaDraftModel, LlamaPromptLookupDecoding

__all__ = ["LlamaDraftModel", "LlamaPromptLookupDecoding"]
