"""GGUF files: the reader, type tables, hyper-parameters, vocab and weight checks."""
