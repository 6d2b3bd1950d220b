"""Streamed chat completions with tools: content and tool calls as they come.

``create_chat_completion(stream=True, tools=...)`` yields OpenAI's chunks: the
role, ``content`` deltas for the text that is not a call, and for each call a
``tool_calls`` delta ``{"index", "id", "type", "function": {"name",
"arguments"}}`` as soon as its text is complete, then ``finish_reason``
("tool_calls" when a call was made). The calls are parsed by tools.py's rules,
so the calls and the content of the stream are those of the same completion
not streamed (content up to the whitespace that the whole reply strips around
calls).

How soon text goes out depends on the family (tools.py):

- ``hermes``: content streams at once, except a tail that could be the start
  of ``<tool_call>`` and trailing whitespace, which wait for the next piece;
  a call streams token by token, as OpenAI's do: once a block's
  ``{"name": "...", "arguments": `` has come, a delta with the id and the name
  (arguments ""), then ``arguments`` deltas as the text comes (holding back a
  ``}`` that may close the block's object), the rest when the block closes (or
  the reply ends). The arguments are the model's text (json.loads of their
  concatenation is the parsed call's). A block whose JSON breaks after its name
  went out stays a call, with the arguments it had;
- ``llama3`` and ``mistral``: tool_stream_json.py.
"""
from __future__ import annotations

import re
import time
import uuid
from typing import Iterator

from .response import _new_id
from .tool_stream_json import JsonToolStream
from .tools import _ARGS_KEY, _call, _json_prefix

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_HEADER = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')
_HELD = re.compile(r"\s*\}?\s*$")     # what may be the end of the block's object


def _partial_tail(text: str, tag: str) -> int:
    """Length of the longest suffix of text that is a proper prefix of tag."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


class ToolStream:
    """Feed it the reply's text piece by piece; it returns the deltas to send
    (the hermes family's; the others: JsonToolStream)."""

    def __init__(self, plan):
        self.plan = plan
        # forced: the prompt ended with the call's opening, which the reply continues
        self.buf = plan.prompt_suffix if (plan.family == "hermes" and plan.forced) else ""
        self.pos = 0
        self.held = ""            # content whitespace not yet sent
        self.n_calls = 0
        self.open_args: int | None = None   # buf index where the open call's arguments start
        self.sent = ""                       # the open call's arguments sent so far

    # -- the deltas
    def _content(self, text: str) -> list[dict]:
        if not text:
            return []
        body = self.held + text
        keep = len(body) - len(body.rstrip())
        out, self.held = body[:len(body) - keep], body[len(body) - keep:]
        return [{"content": out}] if out else []

    def _calls(self, calls: list[dict]) -> list[dict]:
        out = []
        for c in calls:
            out.append({"tool_calls": [{"index": self.n_calls, **c}]})
            self.n_calls += 1
        if out:
            self.held = ""        # whitespace before a call is stripped, as the whole reply's
        return out

    def _hermes_block(self, body: str, closed: bool = True) -> list[dict]:
        got = _json_prefix(body.strip())
        call = _call(got[0], _ARGS_KEY["hermes"]) if got else None
        if self.open_args is not None:      # announced: the rest of its arguments
            return self._close_open(body, call)
        return self._calls([call]) if call else \
            self._content(_OPEN + body + (_CLOSE if closed else ""))

    def _args_delta(self, text: str) -> list[dict]:
        if not text:
            return []
        self.sent += text
        return [{"tool_calls": [{"index": self.n_calls, "function": {"arguments": text}}]}]

    def _stream_open(self, start: int) -> list[dict]:
        """Deltas of the block open at buf[start:] (no closing tag yet)."""
        out: list[dict] = []
        if self.open_args is None:
            m = _HEADER.match(self.buf, start)
            if m is None or m.end() == len(self.buf):   # (more blanks may follow)
                return out
            self.held = ""
            out.append({"tool_calls": [{"index": self.n_calls, "id": f"call_{uuid.uuid4().hex[:24]}",
                                        "type": "function",
                                        "function": {"name": m.group(1), "arguments": ""}}]})
            self.open_args, self.sent = m.end(), ""
        avail = self.buf[self.open_args:]
        avail = avail[:len(avail) - _partial_tail(avail, _CLOSE)]
        safe = avail[:_HELD.search(avail).start()]
        return out + (self._args_delta(safe[len(self.sent):]) if safe.startswith(self.sent)
                      else [])

    def _close_open(self, body: str, call: dict | None) -> list[dict]:
        """The open call's last arguments when its block ends."""
        m = _HEADER.match(body)
        text = body[m.end():].rstrip() if m else ""
        text = text[:-1].rstrip() if text.endswith("}") else text
        if call is not None and text.startswith(self.sent):
            out = self._args_delta(text[len(self.sent):])
        else:
            out = []
        self.open_args, self.sent = None, ""
        self.n_calls += 1
        return out

    def feed(self, text: str) -> list[dict]:
        self.buf += text
        out: list[dict] = []
        while True:
            i = self.buf.find(_OPEN, self.pos)
            if i < 0:
                end = len(self.buf) - _partial_tail(self.buf[self.pos:], _OPEN)
                out += self._content(self.buf[self.pos:end])
                self.pos = end
                return out
            out += self._content(self.buf[self.pos:i])
            e = self.buf.find(_CLOSE, i + len(_OPEN))
            if e < 0:
                self.pos = i               # an open block: its call streams as it comes
                return out + self._stream_open(i + len(_OPEN))
            out += self._hermes_block(self.buf[i + len(_OPEN):e])
            self.pos = e + len(_CLOSE)

    def finish(self) -> list[dict]:
        """The deltas left when the reply has ended."""
        rest = self.buf[self.pos:]
        if rest.startswith(_OPEN):
            out = self._hermes_block(rest[len(_OPEN):], closed=False)
        else:
            out = self._content(rest)
        if self.held and not self.n_calls:
            out.append({"content": self.held})
        self.held = ""
        return out


def tool_chat_chunks(pieces: Iterator, plan, model: str) -> Iterator[dict]:
    """``chat.completion.chunk``s of a reply with tools (see the module's text)."""
    cid, created = _new_id("chatcmpl"), int(time.time())

    def chunk(delta: dict, reason: str | None = None) -> dict:
        return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}]}

    ts = ToolStream(plan) if plan.family == "hermes" else JsonToolStream(plan)
    yield chunk({"role": "assistant"})
    for p in pieces:
        if p.text:
            for d in ts.feed(p.text):
                yield chunk(d)
        if p.finish_reason is not None:
            for d in ts.finish():
                yield chunk(d)
            yield chunk({}, "tool_calls" if ts.n_calls else p.finish_reason)
