"""The engine: sequences, their scheduler, states, caches, sampling."""
