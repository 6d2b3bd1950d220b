"""A bounded Jinja2 sandbox for the chat templates that come inside model files.

jinja2's ImmutableSandboxedEnvironment keeps a template away from Python's
internals and from our data, but not from spending unbounded time or memory:
jinja folds constant expressions while compiling (``9 ** (9 ** 9)`` in a
branch that never runs hangs the compile), and nothing bounds a render's
loops, operators or output. ``BoundedEnvironment`` closes both.

Compiling evaluates nothing a template can make expensive. The optimizer is
off (``optimized=False``); every arithmetic operator is intercepted (jinja
never folds those and runs them through ``call_binop`` / ``call_unop``); every
filter and test, and the output finalizer, take the render context (jinja
folds only context-free ones), which also leaves ``{{ }}`` output and
``{% autoescape %}`` values unfolded. What folding remains (literals, lookups
on literals, comparisons) is linear in the template's size.

Rendering runs under a ``Budget``: a deadline and a number of characters the
render may create. Every template step passes a hook that checks it: each
loop iteration (the parsed template's ``for`` iterables and recursive
``loop()`` calls are wrapped), call, operator, filter, test, lookup and piece
of output (template text becomes output that passes the finalizer too). Steps
that could build something large in one C call (``**``, ``*``, ``+``, ``%``,
padding, replacing, joining, format widths, a container turned into text) are
sized before they run (template_limits.py); what every step builds is charged. Calls
nest at most ``max_depth`` deep (recursive macros). Going over a limit raises
``RenderLimitError``, which names it.
"""
from __future__ import annotations

import itertools
import re
from contextvars import ContextVar
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.runtime import LoopContext, Macro
from jinja2.sandbox import (ImmutableSandboxedEnvironment, SandboxedEscapeFormatter,
                            SandboxedFormatter)
from jinja2.utils import pass_context
from jinja2.visitor import NodeTransformer
from markupsafe import Markup, escape

from .template_limits import (MAX_RANGE, Budget, RenderLimitError, check_binop, check_field,
                     check_filter, check_method, text_size)

__all__ = ["BoundedEnvironment", "Budget", "RenderLimitError", "compile_template", "render"]

_BUDGET: ContextVar[Budget | None] = ContextVar("pyllamakv_template_budget", default=None)


def render(template: jinja2.Template, budget: Budget, **variables: Any) -> str:
    """template.render(**variables) with every hook checking budget."""
    token = _BUDGET.set(budget)
    try:
        return template.render(**variables)
    finally:
        _BUDGET.reset(token)


def compile_template(env: "BoundedEnvironment", source: str) -> jinja2.Template:
    """Parse, wrap loops / concatenation / text in the guards, compile."""
    tree = _Guard().visit(env.parse(source))
    return env.template_class.from_code(env, env.compile(tree), env.make_globals(None), None)


# ---------------------------------------------------------------- the parsed template

def _env_call(name: str, args: list, lineno: int) -> nodes.Call:
    return nodes.Call(nodes.EnvironmentAttribute(name), args, [], None, None, lineno=lineno)


class _Guard(NodeTransformer):
    """Loops iterate through lkv_iter (a tick per item), ``a ~ b`` goes
    through lkv_concat (sized first), and template text becomes a constant
    that is output through the finalizer (counted like any other output)."""

    def visit_For(self, node: nodes.For) -> nodes.For:
        node = self.generic_visit(node)
        node.iter = _env_call("lkv_iter", [node.iter], node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Call:
        node = self.generic_visit(node)
        return _env_call("lkv_concat", node.nodes, node.lineno)

    def visit_TemplateData(self, node: nodes.TemplateData) -> nodes.Const:
        return nodes.Const(node.data, lineno=node.lineno)


def _ticking(iterable: Any, budget: Budget):
    for item in iterable:
        budget.tick()
        yield item


def _lkv_iter(iterable: Any) -> Any:
    budget = _BUDGET.get()
    return iterable if budget is None else _ticking(iterable, budget)


def _lkv_concat(*parts: Any) -> str:
    budget = _BUDGET.get()
    if budget is not None:
        budget.need(sum(len(p) if isinstance(p, str) else text_size(p, budget.value_limit)
                        for p in parts), "a ~ concatenation")
    return "".join([p if isinstance(p, str) else str(p) for p in parts])


@pass_context
def _finalize(context: Any, value: Any) -> Any:
    """Every piece of output: sized, turned into text, charged."""
    budget = _BUDGET.get()
    if budget is None:
        return value
    budget.tick()
    if not isinstance(value, (str, int, float)):
        budget.need(text_size(value, budget.value_limit), "an output value")
    text = value if isinstance(value, str) else str(value)
    budget.charge(len(text))
    return text


def _range(*args: Any) -> range:
    r = range(*args)
    try:
        n = len(r)
    except OverflowError:
        n = MAX_RANGE + 1
    if n > MAX_RANGE:
        raise RenderLimitError(f"range() of more than {MAX_RANGE} items")
    return r


# ---------------------------------------------------------------- filters and tests

_PASS = {"context": lambda c: (c,), "eval_context": lambda c: (c.eval_ctx,),
         "environment": lambda c: (c.environment,)}


def _bounded(name: str, func: Any, is_filter: bool) -> Any:
    """func as a pass_context callable (never folded) that checks the budget."""
    first = _PASS.get(getattr(getattr(func, "jinja_pass_arg", None), "name", None),
                      lambda c: ())

    @pass_context
    def bounded(context: Any, *args: Any, **kwargs: Any) -> Any:
        budget = _BUDGET.get()
        if budget is None:
            return func(*first(context), *args, **kwargs)
        budget.tick()
        if is_filter:
            args = check_filter(budget, name, args, kwargs)
            if name in _SPLIT:
                return _SPLIT[name](budget, lambda *a, **k: func(*first(context), *a, **k),
                                    args, kwargs)
        result = func(*first(context), *args, **kwargs)
        budget.produced(result, args)
        return result

    bounded.__name__ = getattr(func, "__name__", name)
    return bounded


def _sum(budget: Budget, func: Any, args: tuple, kwargs: dict) -> Any:
    """|sum: lists and tuples (``start=[]``) joined in one pass, not one copy per item."""
    start = args[2] if len(args) > 2 else kwargs.get("start", 0)
    attribute = args[1] if len(args) > 1 else kwargs.get("attribute")
    if not isinstance(start, (list, tuple)) or attribute is not None:
        result = func(*args, **kwargs)
        budget.produced(result, args)
        return result
    items = list(args[0])
    for item in items:
        if type(item) is not type(start):
            raise TypeError(f"can only concatenate {type(start).__name__} "
                            f"(not {type(item).__name__}) to {type(start).__name__}")
    budget.need(len(start) + sum(len(item) for item in items), "the |sum of sequences")
    return type(start)(itertools.chain(start, *items))


_WORDS = re.compile(r"(\s+)")
URLIZE_WORD = 512     # longer words are escaped, not searched for links


def _urlize(budget: Budget, func: Any, args: tuple, kwargs: dict) -> Any:
    """|urlize one word at a time, with a tick between words: jinja's filter
    is quadratic in the length of one word ("." * 20000 + "a." takes 30 s in
    one call, where no tick can stop it). A word longer than URLIZE_WORD is
    no link and comes out escaped, as urlize leaves any word that is none."""
    value, rest = args[0], args[1:]
    out = []
    for word in _WORDS.split(str(value)):
        budget.tick()
        if not word or word.isspace():
            out.append(word)
        elif len(word) > URLIZE_WORD:
            out.append(str(escape(word)))
        else:
            out.append(str(func(word, *rest, **kwargs)))
    text = "".join(out)
    budget.produced(text, args)
    return Markup(text) if isinstance(func(""), Markup) else text


_SPLIT = {"sum": _sum, "urlize": _urlize}   # filters run in bounded parts


# ---------------------------------------------------------------- the environment

class _SizedFields:
    def format_field(self, value: Any, format_spec: str) -> Any:
        budget = _BUDGET.get()
        if budget is not None:
            check_field(budget, value, format_spec)
        return super().format_field(value, format_spec)  # type: ignore[misc]


class _Formatter(_SizedFields, SandboxedFormatter):
    pass


class _EscapeFormatter(_SizedFields, SandboxedEscapeFormatter):
    pass


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The immutable sandbox that folds nothing expensive and checks the
    budget of the render in progress (see ``render``) at every step."""

    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})
    intercepted_unops = frozenset({"+", "-"})

    def __init__(self, **options: Any) -> None:
        super().__init__(optimized=False, finalize=_finalize, autoescape=False, **options)
        self.globals.pop("lipsum", None)          # unbounded by design; no template needs it
        self.globals["range"] = _range
        self.filters = {k: _bounded(k, f, True) for k, f in self.filters.items()}
        self.tests = {k: _bounded(k, f, False) for k, f in self.tests.items()}
        self.lkv_iter = _lkv_iter
        self.lkv_concat = _lkv_concat

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        budget = _BUDGET.get()
        if budget is None:
            return self.binop_table[operator](left, right)
        budget.tick()
        check_binop(budget, operator, left, right)
        result = self.binop_table[operator](left, right)
        budget.produced(result, (left, right))
        return result

    def call_unop(self, context: Any, operator: str, arg: Any) -> Any:
        budget = _BUDGET.get()
        if budget is not None:
            budget.tick()
        return self.unop_table[operator](arg)

    def getattr(self, obj: Any, attribute: str) -> Any:
        budget = _BUDGET.get()
        if budget is not None:
            budget.tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        budget = _BUDGET.get()
        if budget is not None:
            budget.tick()
        return super().getitem(obj, argument)

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        budget = _BUDGET.get()
        if budget is None:
            return super().call(context, obj, *args, **kwargs)
        budget.tick()
        if isinstance(obj, LoopContext) and args:       # loop(children) in a recursive for
            args = (_ticking(args[0], budget),) + args[1:]
        else:
            args = check_method(budget, obj, args, kwargs)
        if budget.depth >= budget.max_depth:
            budget.fail(f"calls nest more than {budget.max_depth} deep (a recursive macro?)")
        budget.depth += 1
        try:
            result = super().call(context, obj, *args, **kwargs)
        finally:
            budget.depth -= 1
        if not isinstance(obj, (Macro, LoopContext)):   # their output was charged as made
            budget.produced(result, args + (getattr(obj, "__self__", None),))
        return result

    def wrap_str_format(self, value: Any) -> Any:
        """str.format / format_map with every field's width sized first."""
        if super().wrap_str_format(value) is None:
            return None
        owner, is_map = value.__self__, value.__name__ == "format_map"
        formatter = (_EscapeFormatter(self, escape=owner.escape)
                     if isinstance(owner, Markup) else _Formatter(self))

        def wrapper(*args: Any, **kwargs: Any) -> str:
            if is_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument")
                args, kwargs = (), args[0]
            return type(owner)(formatter.vformat(owner, args, kwargs))

        return wrapper

