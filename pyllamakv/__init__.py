"""pyllamakv: long-context GGUF models from Python, with a streamed KV cache."""
