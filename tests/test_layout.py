"""The repository's folders import one way: tests import the package and
tests/fixtures, never benchmarks/ or tools/; benchmarks/ and tools/ (dev/tools
too) may import tests/fixtures, never a test module or another test helper.

Read from the source with ast: every ``import`` / ``from ... import`` (at the
top or inside a function), and every ``sys.path`` entry made from a path
naming one of the folders. Running a benchmark as a script (a path passed to a
subprocess) is not an import and is allowed."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOL_DIRS = ("benchmarks", "tools", "dev/tools")


def _modules(folder: Path) -> set[str]:
    return {p.stem for p in folder.glob("*.py")} if folder.is_dir() else set()


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, top-level module name) of every absolute import in path."""
    out = []
    for n in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(n, ast.ImportFrom) and not n.level and n.module:
            out.append((n.lineno, n.module.split(".")[0]))
        elif isinstance(n, ast.Import):
            out += [(n.lineno, a.name.split(".")[0]) for a in n.names]
    return out


def _path_inserts(path: Path) -> list[tuple[int, str]]:
    """(line, source) of every sys.path.insert / append call in path."""
    out = []
    for n in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr in ("insert", "append")
                and ast.unparse(n.func.value) == "sys.path"):
            out.append((n.lineno, ast.unparse(n)))
    return out


def violations(root: Path) -> list[str]:
    """Each import against the rules above, as 'file:line: why'."""
    tests = root / "tests"
    tool_modules = set().union(*(_modules(root / d) for d in TOOL_DIRS))
    test_modules = _modules(tests) - {"conftest"}
    out = []
    for p in sorted(tests.rglob("*.py")):
        rel = p.relative_to(root)
        for line, mod in _imports(p):
            if mod in tool_modules and mod not in test_modules:
                out.append(f"{rel}:{line}: a test imports {mod} (benchmarks/ or tools/)")
        for line, src in _path_inserts(p):
            if any(f'"{d.split("/")[-1]}"' in src or f"'{d.split('/')[-1]}'" in src
                   for d in TOOL_DIRS):
                out.append(f"{rel}:{line}: a test puts benchmarks/ or tools/ on sys.path")
    for d in TOOL_DIRS:
        for p in sorted((root / d).glob("*.py")) if (root / d).is_dir() else []:
            rel = p.relative_to(root)
            for line, mod in _imports(p):
                if mod in test_modules:
                    out.append(f"{rel}:{line}: imports the test module {mod} "
                               "(only tests/fixtures may be imported)")
    return out


def test_tests_and_tools_import_one_way():
    assert violations(ROOT) == []


def test_violations_are_found(tmp_path):
    """The checker on a small tree that breaks each rule once."""
    (tmp_path / "tests" / "fixtures").mkdir(parents=True)
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "tools").mkdir()
    (tmp_path / "benchmarks" / "bench_x.py").write_text(
        "import sys\nsys.path.insert(0, 'tests')\nfrom fixtures import tiny_models\n")
    (tmp_path / "tools" / "diag.py").write_text("def f():\n    import test_y\n")
    (tmp_path / "tests" / "test_y.py").write_text(
        "import sys\nsys.path.insert(0, str(ROOT / \"benchmarks\"))\nimport bench_x\n")
    (tmp_path / "tests" / "test_z.py").write_text("from fixtures.tiny_models import w\n")
    (tmp_path / "tests" / "fixtures" / "tiny_models.py").write_text("import numpy\n")
    got = violations(tmp_path)
    assert got == [
        "tests/test_y.py:3: a test imports bench_x (benchmarks/ or tools/)",
        "tests/test_y.py:2: a test puts benchmarks/ or tools/ on sys.path",
        "tools/diag.py:2: imports the test module test_y (only tests/fixtures may be imported)",
    ], got
