"""Streamed tool calls of the JSON families (tools.py's ``llama3`` and ``mistral``).

In these families a call opens the reply: llama3 writes ``{"name": ...,
"parameters": {...}}`` (after an optional ``<|python_tag|>``), mistral
``[TOOL_CALLS]`` then a list ``[{"name": ..., "arguments": {...}}, ...]`` or
``name[ARGS]{...}``. The stream decides from the reply's first characters:

- a reply that cannot be a call streams as content at once (llama3: one that
  does not start with ``{``, ``[`` or the tag; mistral: one that starts with
  neither JSON nor ``[TOOL_CALLS]``, whose ``name[ARGS]`` form may still come
  anywhere, is parsed when it ends, as before);
- a call streams token by token, as the hermes blocks do (tool_stream.py):
  once ``{"name": "...", "parameters": `` (or ``"arguments"``) has come, a delta
  with the id and the name, then ``arguments`` deltas as the JSON value comes
  (the model's text: json.loads of their concatenation is the parsed call's),
  the call closed when its object closes; in a list, the next object the same
  way; after the JSON, the rest is content (leading whitespace stripped, as the
  whole reply's parse strips it).
- An object whose keys come in another order is left to the parse of the whole
  reply at its end (its calls after those already sent). A call whose JSON is
  cut by the end of the reply stays a call with the arguments it had.
"""
from __future__ import annotations

import json
import re
import uuid

from .tools import parse_tool_calls

_TAGS = {"llama3": "<|python_tag|>", "mistral": "[TOOL_CALLS]"}
_HEADER = re.compile(r'\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"'
                     r"\s*:\s*")
_WS = re.compile(r"\s*")
_DECODER = json.JSONDecoder()


def _decoded_end(text: str, start: int) -> int | None:
    """End of the JSON value starting at text[start], None while it is incomplete."""
    try:
        return _DECODER.raw_decode(text, start)[1]
    except json.JSONDecodeError:
        return None


class JsonToolStream:
    """Feed it the reply's text piece by piece; it returns the deltas to send
    (the same interface as tool_stream.ToolStream)."""

    def __init__(self, plan):
        self.plan = plan
        self.tag = _TAGS[plan.family]
        self.buf = ""
        self.mode = "decide"      # decide, json, content, whole
        self.cur = 0              # json: where the next object (or the list's end) is
        self.in_list = False
        self.bare = False         # mistral's name[ARGS]{...}: arguments without an object
        self.obj = 0              # the open call's object start
        self.n_calls_in_list = 0
        self.open_args: int | None = None
        self.sent = ""
        self.n_calls = 0
        self.pos = 0              # content: what has gone out
        self.lead = True          # content after the calls: leading whitespace dropped

    # -- deltas
    def _args(self, text: str) -> list[dict]:
        if not text:
            return []
        self.sent += text
        return [{"tool_calls": [{"index": self.n_calls, "function": {"arguments": text}}]}]

    def _open(self, name: str, args_at: int) -> list[dict]:
        self.open_args, self.sent = args_at, ""
        return [{"tool_calls": [{"index": self.n_calls, "id": f"call_{uuid.uuid4().hex[:24]}",
                                 "type": "function",
                                 "function": {"name": name, "arguments": ""}}]}]

    def _args_upto(self, end: int) -> list[dict]:
        text = self.buf[self.open_args:end]
        return self._args(text[len(self.sent):]) if text.startswith(self.sent) else []

    def _content(self) -> list[dict]:
        text = self.buf[self.pos:]
        if self.lead and self.n_calls:
            text = text.lstrip()
        keep = len(text) - len(text.rstrip())    # trailing blanks wait (stripped at the end)
        out = text[:len(text) - keep]
        self.pos = len(self.buf) - keep
        if out:
            self.lead = False
        return [{"content": out}] if out else []

    # -- deciding
    def _decide(self) -> None:
        s = self.buf.lstrip()
        if not s or (self.tag.startswith(s) and s != self.tag):
            return                                 # (may still be the tag)
        tagged = s.startswith(self.tag)
        if tagged:
            s = s[len(self.tag):].lstrip()
            if not s:
                return
        start = len(self.buf) - len(s)
        if s.startswith(("{", "[")):
            self.mode, self.cur = "json", start
            if s.startswith("["):
                self.in_list, self.cur = True, start + 1
        elif tagged and self.plan.family == "mistral":   # [TOOL_CALLS]name[ARGS]{...}
            self.mode, self.bare, self.cur = "json", True, start
        elif tagged or self.plan.family == "mistral":
            self.mode = "whole"       # (mistral's name[ARGS] may come anywhere)
        else:
            self.mode = "content"

    # -- the calls
    def _step(self) -> tuple[list[dict], bool]:
        """One step of the json mode: (deltas, whether to go on)."""
        b = self.buf
        if self.open_args is None:
            p = _WS.match(b, self.cur).end()
            if p == len(b):
                return [], False
            if self.bare:
                i = b.find("[ARGS]", p)
                if i < 0:
                    return [], False
                name = b[p:i].strip()
                return self._open(name, _WS.match(b, i + 6).end()), True
            if self.in_list and self.n_calls_in_list and b[p] in ",]":
                if b[p] == "]":
                    return self._end_json(p + 1), True
                self.cur = p + 1
                return [], True
            if b[p] != "{":
                return self._fallback(), False
            m = _HEADER.match(b, p)
            if m is None or m.end() == len(b):
                if _decoded_end(b, p) is not None:     # a whole object not in our order
                    return self._fallback(), False
                return [], False
            self.obj = p
            return self._open(json.loads(f'"{m.group(1)}"'), m.end()), True
        end = _decoded_end(b, self.open_args)
        if end is None or end == len(b):               # arguments still coming
            return self._args_upto(len(b)), False
        out = self._args_upto(end)
        if self.bare:
            self.open_args = None
            self.n_calls += 1
            return out + self._end_json(end), True
        close = _decoded_end(b, self.obj)              # the call's object
        if close is None:
            return out, False
        self.open_args = None
        self.n_calls += 1
        self.n_calls_in_list += 1
        self.cur = close
        if not self.in_list:
            return out + self._end_json(close), True
        return out, True

    def _end_json(self, at: int) -> list[dict]:
        self.mode, self.pos = "content", at
        return []

    def _fallback(self) -> list[dict]:
        self.mode = "whole"
        return []

    def feed(self, text: str) -> list[dict]:
        self.buf += text
        if self.mode == "decide":
            self._decide()
        out: list[dict] = []
        go = self.mode == "json"
        while go and self.mode == "json":
            got, go = self._step()
            out += got
        if self.mode == "content":
            out += self._content()
        return out

    def finish(self) -> list[dict]:
        """The deltas left when the reply has ended."""
        if self.mode == "json" and self.open_args is not None:   # cut short: the call stays
            out = self._args_upto(len(self.buf.rstrip()))
            self.n_calls += 1
            return out
        if self.mode in ("decide", "whole"):
            content, calls = parse_tool_calls(self.buf, self.plan)
            out = []
            for c in calls[self.n_calls:]:
                out.append({"tool_calls": [{"index": self.n_calls, **c}]})
                self.n_calls += 1
            if calls:
                return ([{"content": content}] if content else []) + out
            return [{"content": self.buf}] if self.buf and not self.n_calls else []
        if self.mode == "content":
            out = self._content()
            rest = self.buf[self.pos:]
            if rest and not self.n_calls:
                out.append({"content": rest})
            return out
        return []
