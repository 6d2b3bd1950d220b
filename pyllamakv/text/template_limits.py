"""Render limits for chat templates (see template.py): the budget one render
spends, and the size of what one template step would build, known before
the step runs.

A step that runs in one C call (``9 ** 999999``, ``'x' * 10**12``,
``'{:>999999999}'.format(1)``, ``s.replace('a', big)``, ``[s] * 10**5`` turned
into text) cannot be interrupted, so the checks here size it from its
operands first. Sizes of text made from containers are estimates: every
string counts its length, every element a few characters; repr's escapes
can make the real text longer by a bounded factor, and what was built is
measured and charged afterwards (``Budget.produced``).
"""
from __future__ import annotations

import math
import re
import time
from collections.abc import ItemsView, KeysView, ValuesView
from dataclasses import dataclass
from typing import Any

from jinja2.runtime import Undefined
from jinja2.utils import Namespace

MAX_RANGE = 100_000          # range() items (jinja's sandbox has the same limit)
MAX_INT_BITS = 1 << 16       # the largest integer a template may build
MAX_JSON_INDENT = 16         # |tojson(indent=...)
MAX_DEPTH = 64               # nested calls: macros calling macros, recursive loops

_SEQ = (str, bytes, list, tuple)


class RenderLimitError(Exception):
    """A render went over a limit. Deliberately not a ValueError or TypeError:
    some of jinja's filters catch those and carry on."""


@dataclass(slots=True)
class Budget:
    """What one render may spend. Failing is sticky: once over a limit, every
    later check fails too, whatever the template does in between."""

    seconds: float                 # time limit of the render
    max_chars: int                 # characters (or items) it may create, and the largest value
    max_depth: int = MAX_DEPTH
    deadline: float = 0.0          # time.monotonic() past which it fails
    chars_left: int = 0
    depth: int = 0                 # calls in progress
    failed: str | None = None

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.seconds
        self.chars_left = self.max_chars

    @property
    def value_limit(self) -> int:
        return self.max_chars

    def fail(self, reason: str) -> None:
        self.failed = self.failed or reason
        raise RenderLimitError(self.failed)

    def tick(self) -> None:
        if self.failed is not None:
            raise RenderLimitError(self.failed)
        if time.monotonic() > self.deadline:
            self.fail(f"rendering ran past the time limit of {self.seconds:g} s")

    def need(self, n: int, what: str) -> None:
        """Refuse a step that would build n characters or items."""
        if n > self.max_chars:
            self.fail(f"{what} would be {n:,} long, over the limit of {self.max_chars:,}")

    def charge(self, n: int) -> None:
        self.chars_left -= n
        if self.chars_left < 0:
            self.fail(f"the render created more than {self.max_chars:,} characters")

    def produced(self, result: Any, inputs: tuple) -> None:
        """A step built result from inputs: check its size (a container's with
        its items': ``[s] * n`` is many copies of s to a sort or a compare),
        charge what it added."""
        n = size(result)
        if n:
            self.need(n, "a value")
            if isinstance(result, (list, tuple)):
                self.need(n + sum(map(size, result)), "a sequence with its items")
            elif isinstance(result, dict):
                self.need(n + sum(map(size, result.values())), "a dict with its items")
            grown = n - max((size(x) for x in inputs), default=0)
            if grown > 0:
                self.charge(grown)


def size(value: Any) -> int:
    """len() of a string or container, 0 for anything else."""
    return len(value) if isinstance(value, (*_SEQ, dict, set, frozenset)) else 0


def text_size(value: Any, limit: int) -> int:
    """About len(str(value)), counting no further than just past limit
    (containers may share items: ``[s] * 1000`` is walked, never printed)."""
    total, stack = 0, [value]
    while stack and total <= limit:
        v = stack.pop()
        if isinstance(v, (str, bytes)):
            total += len(v) + 2
        elif isinstance(v, int):
            total += v.bit_length() // 3 + 1
        elif isinstance(v, (float, type(None))):
            total += 24
        elif isinstance(v, dict):
            total += 2 + 4 * len(v)
            if total <= limit:
                stack.extend(v.keys())
                stack.extend(v.values())
        elif isinstance(v, (list, tuple, set, frozenset, KeysView, ValuesView, ItemsView)):
            total += 2 + 2 * len(v)
            if total <= limit:
                stack.extend(v)
        elif isinstance(v, Namespace):
            total += 12
            stack.append(object.__getattribute__(v, "_Namespace__attrs"))
        elif not isinstance(v, Undefined):
            total += 80
    return total


# ---------------------------------------------------------------- operators

_PRINTF = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")
_DIGITS = re.compile(r"\d+")


def _number(digits: str) -> int:
    return int(digits) if len(digits) < 16 else 10**16


def printf_size(budget: Budget, fmt: str | bytes, args: Any) -> int:
    """Upper-ish size of fmt % args: the format, the arguments' text, every width."""
    text = fmt if isinstance(fmt, str) else fmt.decode("latin-1")
    values = args if isinstance(args, tuple) else (args,)
    star = max((abs(v) for v in values if isinstance(v, int)), default=0)
    n = len(text) + text_size(args, budget.max_chars)
    for m in _PRINTF.finditer(text):
        n += sum(star if g == "*" else _number(g) for g in m.groups() if g)
    return n


def _repeated(budget: Budget, seq: Any) -> int:
    """What one copy of seq weighs in a repetition: its length, or its items' text."""
    return len(seq) if isinstance(seq, (str, bytes)) else max(1, text_size(seq, budget.max_chars))


def check_binop(budget: Budget, op: str, a: Any, b: Any) -> None:
    if op == "**" and isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1:
        if b > MAX_INT_BITS or b * math.log2(abs(a)) > MAX_INT_BITS:
            budget.fail(f"** would build an integer of more than {MAX_INT_BITS} bits")
    elif op == "*":
        if isinstance(a, int) and isinstance(b, int):
            if a.bit_length() + b.bit_length() > MAX_INT_BITS:
                budget.fail(f"* would build an integer of more than {MAX_INT_BITS} bits")
        elif isinstance(b, int) and isinstance(a, _SEQ):
            budget.need(_repeated(budget, a) * b, "a repeated sequence")
        elif isinstance(a, int) and isinstance(b, _SEQ):
            budget.need(_repeated(budget, b) * a, "a repeated sequence")
    elif op == "+" and isinstance(a, _SEQ) and isinstance(b, _SEQ):
        budget.need(len(a) + len(b), "a concatenation")
    elif op == "%" and isinstance(a, (str, bytes)):
        budget.need(printf_size(budget, a, b), "a %-formatted string")


def check_field(budget: Budget, value: Any, spec: str) -> None:
    """One field of str.format: its text and the widths in its spec."""
    budget.tick()
    n = text_size(value, budget.max_chars) + sum(_number(d) for d in _DIGITS.findall(spec))
    budget.need(n, "a str.format field")


# ---------------------------------------------------------------- methods and filters

def check_method(budget: Budget, func: Any, args: tuple, kwargs: dict) -> tuple:
    """A str / bytes method call; returns args (join's iterable read into a list)."""
    owner = getattr(func, "__self__", None)
    if isinstance(owner, int) and getattr(func, "__name__", "") == "to_bytes":
        length = args[0] if args else kwargs.get("length", 1)
        if isinstance(length, int):           # (1).to_bytes(10**10, "big") is one C call
            budget.need(length, "the result of int.to_bytes()")
        return args
    if not isinstance(owner, (str, bytes)) or not args:
        return args
    name = getattr(func, "__name__", "")
    if name in ("center", "ljust", "rjust", "zfill") and isinstance(args[0], int):
        budget.need(args[0], f"the result of str.{name}()")
    elif name == "expandtabs" and isinstance(args[0], int):
        tabs = owner.count("\t" if isinstance(owner, str) else b"\t")
        budget.need(len(owner) + tabs * args[0], "the result of str.expandtabs()")
    elif name == "replace" and len(args) >= 2:
        old, new = args[0], args[1]
        count = args[2] if len(args) > 2 else kwargs.get("count", -1)
        n = owner.count(old) if old else len(owner) + 1
        if isinstance(count, int) and count >= 0:
            n = min(n, count)
        budget.need(len(owner) + n * len(new), "the result of str.replace()")
    elif name == "join":
        items = list(args[0])
        budget.need(sum(size(x) for x in items) + len(owner) * len(items),
                    "the result of str.join()")
        return (items,) + args[1:]
    elif name == "translate" and isinstance(args[0], dict):
        longest = max((len(v) for v in args[0].values() if isinstance(v, _SEQ)), default=1)
        budget.need(len(owner) * max(longest, 1), "the result of str.translate()")
    return args


# filters that turn their input into text first, or compare its items
_TEXT_FILTERS = frozenset({
    "capitalize", "center", "e", "escape", "forceescape", "format", "indent", "lower",
    "pprint", "replace", "safe", "string", "striptags", "title", "tojson", "trim",
    "truncate", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr",
    "sort", "unique", "dictsort", "groupby", "min", "max"})
WRAP_WORK = 1000            # |wordwrap cuts a long word in pieces: characters copied per budget char


def check_filter(budget: Budget, name: str, args: tuple, kwargs: dict) -> tuple:
    """A filter call (args[0] is the filtered value); returns args (|join's
    iterable read into a list)."""
    if not args:
        return args
    value, rest = args[0], args[1:]

    def arg(i: int, key: str, default: Any = None) -> Any:
        return rest[i] if len(rest) > i else kwargs.get(key, default)

    if name in _TEXT_FILTERS and not isinstance(value, str):
        budget.need(text_size(value, budget.max_chars), f"the text of the |{name} input")
    text = value if isinstance(value, str) else ""
    width = {"center": arg(0, "width", 80), "batch": arg(0, "linecount", 1),
             "slice": arg(0, "slices", 1)}.get(name)
    if isinstance(width, int):
        fill = arg(1, "fill_with")
        each = 1 if name == "center" or fill is None else max(1, text_size(fill, budget.max_chars))
        budget.need(width * each, f"the result of |{name}")
    elif name == "indent":
        w = arg(0, "width", 4)
        per = w if isinstance(w, int) else len(str(w))
        budget.need(len(text) + (text.count("\n") + 1) * max(per, 0), "the result of |indent")
    elif name == "wordwrap":
        w, wrap = arg(0, "width", 79), arg(2, "wrapstring") or "\n"
        if isinstance(w, int) and isinstance(wrap, str):
            lines = len(text) // max(w, 1) + text.count("\n") + 1
            budget.need(len(text) + lines * len(wrap), "the result of |wordwrap")
            cuts = sum(len(word) ** 2 for word in text.split() if len(word) > w) // max(w, 1)
            if cuts > WRAP_WORK * budget.max_chars:       # textwrap copies the rest at each cut
                budget.fail(f"|wordwrap({w}) would cut words of up to {len(text):,} characters "
                            "one piece at a time")
    elif name == "replace":
        old, new, count = arg(0, "old", ""), arg(1, "new", ""), arg(2, "count")
        if isinstance(old, str) and isinstance(new, str):
            n = text.count(old) if old else len(text) + 1
            if isinstance(count, int) and count >= 0:
                n = min(n, count)
            budget.need(len(text) + n * len(new), "the result of |replace")
    elif name == "join":
        items, sep = list(value), arg(0, "d", "")
        budget.need(text_size(items, budget.max_chars) + size(sep) * len(items),
                    "the result of |join")
        return (items,) + rest
    elif name == "format":
        budget.need(printf_size(budget, text, rest or kwargs), "the result of |format")
    elif name == "tojson" and isinstance(arg(0, "indent"), int):
        indent = arg(0, "indent")
        if indent > MAX_JSON_INDENT:
            budget.fail(f"|tojson indent {indent} is over the limit of {MAX_JSON_INDENT}")
        budget.need(text_size(value, budget.max_chars) * (1 + max(indent, 0)),
                    "the result of |tojson")
    return args
