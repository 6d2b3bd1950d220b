"""The engine's sequences: histories, lanes, batches, states, caches, sampling."""
