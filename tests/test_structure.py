"""The package's shape: no import circles between its modules, every module
under 400 lines, and no module reaching into another's private attributes. The import graph is read from the source with ast: every
``import`` / ``from ... import`` of a pyllamakv module, at the top or inside a
function, except those under ``if TYPE_CHECKING:`` (annotations only).

A *reach* is ``x._name`` (not a dunder) where x is not ``self``, ``cls`` or
``super()``, in a module that does not itself define ``_name`` (a def, a
class, or an assignment to it): ``llm._ctx`` in api/completion.py reads a
private attribute that llama.py owns. A feature asks the object's public
surface instead (``llm.sequence``, ``llm.engine``, ``llm.guard``...).

Run ``python tests/test_structure.py`` to print the graph's circles and the
reaches, if any."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "pyllamakv"
MAX_LINES = 400


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The pyllamakv modules path imports at run time."""
    tree = ast.parse(path.read_text())
    name = module_name(path)
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    typing_only = {id(n) for top in ast.walk(tree) if isinstance(top, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(top.test) for n in ast.walk(top)}
    out: set[str] = set()
    for n in ast.walk(tree):
        if id(n) in typing_only:
            continue
        if isinstance(n, ast.ImportFrom):
            base = ".".join(here[:len(here) - n.level + 1] + [n.module or ""]).strip(".") \
                if n.level else (n.module or "")
            for a in n.names:   # `from pkg import module` names the module itself
                sub = f"{base}.{a.name}"
                out.add(sub if sub in modules else base)
        elif isinstance(n, ast.Import):
            out.update(a.name for a in n.names)
    return {m for m in out if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PKG.rglob("*.py")}
    return {m: imports_of(p, set(files)) for m, p in files.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def own_privates(tree: ast.AST) -> set[str]:
    """The private names a module defines: defs, classes, assigned names and attributes."""
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
            out.add(n.attr)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
    return {x for x in out if x.startswith("_")}


def private_reaches(source: str) -> list[str]:
    """``x._name`` of source that reach into another module's private attributes."""
    tree = ast.parse(source)
    own = own_privates(tree)
    out = []
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Attribute) and n.attr.startswith("_")
                and not n.attr.startswith("__") and n.attr not in own):
            continue
        v = n.value
        if isinstance(v, ast.Name) and v.id in ("self", "cls"):
            continue
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "super":
            continue
        out.append(f"{n.lineno}: {ast.unparse(n)}")
    return out


def all_reaches() -> dict[str, list[str]]:
    found = {str(p.relative_to(PKG.parent)): private_reaches(p.read_text())
             for p in sorted(PKG.rglob("*.py"))}
    return {k: v for k, v in found.items() if v}


def test_reaches_are_found():
    src = ("class A:\n    def f(self, llm):\n        self._own = 1\n"
           "        return llm._ctx, llm._own, self._x, super()._g(), llm.__class__\n")
    assert private_reaches(src) == ["4: llm._ctx"]


def test_no_private_reaches():
    assert all_reaches() == {}


def test_graph_sees_imports():
    g = import_graph()
    assert "pyllamakv.core.ffi" in g["pyllamakv.core.native"]
    assert "pyllamakv.errors" in g["pyllamakv.core.status"]


def test_circles_are_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles():
    assert circles(import_graph()) == []


def test_modules_are_small():
    big = {str(p.relative_to(PKG.parent)): n for p in PKG.rglob("*.py")
           if (n := len(p.read_text().splitlines())) >= MAX_LINES}
    assert big == {}


if __name__ == "__main__":
    for c in circles(import_graph()):
        print(" -> ".join(c))
    for path, reaches in all_reaches().items():
        for r in reaches:
            print(f"{path}:{r}")
