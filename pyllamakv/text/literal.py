"""Keeping message text literal through a chat template (special-token injection).

A rendered chat prompt is tokenized with special parsing, so that the
template's own markers (``<|im_start|>``, ``<|im_end|>``) become control
tokens. Without more care, the same text typed by a user or returned by a
tool becomes control tokens too: ``<|im_end|>\\n<|im_start|>system\\n...`` in a
user message is a forged system turn.

Before rendering, every occurrence of a control token's text inside the
caller's strings (messages, tools, any variable) is swapped for a placeholder
that no template can take for a marker; after rendering, the prompt is cut at
the placeholders into segments, and the swapped texts are tokenized as plain
text (special=False) while the template's own text keeps special parsing.
Strings without any control token's text (nearly all) are left as they are.
"""
from __future__ import annotations

import re
import secrets
from typing import Any, Iterable

Segments = list[tuple[str, bool]]     # (text, special parsing allowed)


class Literals:
    """The control-token texts of one vocab, and the swaps of one render."""

    def __init__(self, control_texts: Iterable[str]) -> None:
        texts = sorted({t for t in control_texts if t}, key=len, reverse=True)
        self._find = re.compile("|".join(map(re.escape, texts))) if texts else None
        self._nonce = secrets.token_hex(4)
        self.swapped: list[str] = []

    def protect(self, value: Any) -> Any:
        """value with the control texts in its strings swapped (containers copied
        only where something was swapped)."""
        if self._find is None:
            return value
        if isinstance(value, str):
            return self._find.sub(self._swap, value) if self._find.search(value) else value
        if isinstance(value, dict):
            out = {k: self.protect(v) for k, v in value.items()}
            return value if all(out[k] is value[k] for k in value) else out
        if isinstance(value, (list, tuple)):
            out = [self.protect(v) for v in value]
            return value if all(a is b for a, b in zip(out, value)) else type(value)(out) \
                if isinstance(value, tuple) else out
        return value

    def _swap(self, m: re.Match) -> str:
        self.swapped.append(m.group())
        return f"\ue000{self._nonce}.{len(self.swapped) - 1}\ue001"

    def segments(self, rendered: str) -> Segments:
        """rendered cut at the placeholders: the template's text (special
        parsing) and each swapped text back in place (plain text)."""
        if not self.swapped:
            return [(rendered, True)]
        out: Segments = []
        pattern = re.compile(f"\ue000{self._nonce}\\.(\\d+)\ue001")
        pos = 0
        for m in pattern.finditer(rendered):
            k = int(m.group(1))
            if k >= len(self.swapped):
                continue
            if m.start() > pos:
                out.append((rendered[pos:m.start()], True))
            out.append((self.swapped[k], False))
            pos = m.end()
        if pos < len(rendered):
            out.append((rendered[pos:], True))
        return out


def joined(segments: Segments) -> str:
    return "".join(text for text, _ in segments)
