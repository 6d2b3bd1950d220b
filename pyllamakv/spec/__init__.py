"""Speculative decoding: drafters, verification, draft length, MTP."""
