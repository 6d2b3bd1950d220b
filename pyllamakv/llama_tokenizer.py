"""llama_cpp.llama_tokenizer: tokenizer objects (text/llama_tokenizer.py)."""
from .text.llama_tokenizer import BaseLlamaTokenizer, LlamaHFTokenizer, LlamaTokenizer

__all__ = ["BaseLlamaTokenizer", "LlamaTokenizer", "LlamaHFTokenizer"]
