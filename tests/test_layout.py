"""The package's house rules, read from the source with ``ast`` (nothing is imported):
no import cycle inside ``sciml_bench``, and imports point down the data flow."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "sciml_bench"

#: the data flow, lowest first: a module may import its own layer or a lower one
LAYERS = ("problem", "measure", "backends", "cnn", "results", "run", "cli")


def _modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        parts = ("sciml_bench", *path.relative_to(PKG).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every sciml_bench module ``name`` imports, lazy (in-function) imports included."""
    is_pkg = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: len(name.split(".")) - node.level + is_pkg]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            # `from pkg import mod` imports the submodule
            found |= {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known}
    return {m for m in found if m in known and m != name}


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {n: _imports(n, p, set(mods)) for n, p in mods.items()}


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else -1


def test_the_import_graph_is_read() -> None:
    g = _graph()
    assert "sciml_bench.run.runner" in g
    assert "sciml_bench.problem.spec" in g["sciml_bench.problem.codegen"]


def test_no_import_cycle() -> None:
    g = _graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for m in sorted(g[n]):
            if state.get(m) == 1:
                cycles.append([*stack[stack.index(m):], m])
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(g):
        if n not in state:
            visit(n)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_imports_point_down_the_data_flow() -> None:
    bad = [
        f"{n} ({LAYERS[_layer(n)]}) imports {m} ({LAYERS[_layer(m)]})"
        for n, deps in _graph().items()
        for m in deps
        if _layer(n) >= 0 and _layer(m) > _layer(n)
    ]
    assert not bad, "\n".join(sorted(bad))


@pytest.mark.parametrize("package", ["cnn", "backends", "problem", "measure", "results"])
def test_nothing_below_run_imports_run(package: str) -> None:
    g = _graph()
    offenders = [
        f"{n} imports {m}"
        for n, deps in g.items()
        if n.startswith(f"sciml_bench.{package}")
        for m in deps
        if m.startswith("sciml_bench.run") or m.startswith("sciml_bench.cli")
    ]
    assert not offenders, offenders


def test_every_module_lives_in_a_layer() -> None:
    loose = [n for n in _graph() if n.count(".") == 1 and n.split(".")[1] not in LAYERS]
    assert not loose, f"modules outside the layered packages: {loose}"


def test_the_layout_doc_table_names_every_module() -> None:
    """Each module under a layer's folder, or a subpackage of one, is named in its folder's
    row of the layout table in docs/layout.md, so a reader finds where a backend, a metric
    or a schema field lives."""
    layout = (PKG.parent / "docs" / "layout.md").read_text()
    rows = {ln.split("|")[1].strip().strip("`"): ln for ln in layout.splitlines()
            if ln.startswith("| `sciml_bench/")}  # fmt: skip
    missing = []
    folders = {path.parent for package in LAYERS for path in (PKG / package).rglob("*.py")}
    for folder in sorted(folders):
        name = f"sciml_bench/{folder.relative_to(PKG).as_posix()}/"
        row = rows.get(name)
        assert row is not None, f"docs/layout.md's table has no row for {name}"
        for path in sorted(folder.glob("*.py")):
            if path.name != "__init__.py" and f"`{path.name}`" not in row:
                missing.append(f"{name}{path.name}")
    assert not missing, f"not in docs/layout.md's table: {missing}"


#: the longest a function may be, ``def`` line to last line (decorators not counted)
MAX_FUNCTION_LINES = 60


def _long_functions(source: str, where: str) -> list[str]:
    """Every function in ``source`` longer than MAX_FUNCTION_LINES, as ``where:line name``."""
    long = []
    for node in ast.walk(ast.parse(source, where)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            n = node.end_lineno - node.lineno + 1
            if n > MAX_FUNCTION_LINES:
                long.append(f"{where}:{node.lineno} {node.name} ({n} lines)")
    return long


def test_no_function_is_longer_than_sixty_lines() -> None:
    """Short functions, named for what they do: none in the package over 60 lines."""
    long = [f for path in sorted(PKG.rglob("*.py"))
            for f in _long_functions(path.read_text(), str(path.relative_to(PKG)))]  # fmt: skip
    assert not long, "functions over 60 lines:\n" + "\n".join(long)


def test_the_function_length_check_counts_nested_and_method_bodies() -> None:
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    source = f"class C:\n    def f(self):\n{body}\n\ndef short():\n    return 1\n"
    assert _long_functions(source, "m.py") == [f"m.py:2 f ({MAX_FUNCTION_LINES + 1} lines)"]


CODEGEN = PKG / "problem" / "codegen"


def _sibling(module: str | None, level: int) -> bool:
    """Whether an import inside ``problem/codegen/`` names the package or a sibling."""
    if level:
        return level == 1
    return module is not None and (module + ".").startswith("sciml_bench.problem.codegen.")


def test_code_generation_lives_in_one_package() -> None:
    """Every code generator and printer is a module of ``sciml_bench/problem/codegen/``, and
    none reaches into a sibling's underscore names (they share only what they publish)."""
    loose = sorted(p.name for p in (PKG / "problem").glob("*.py")
                   if p.name.startswith(("codegen", "printing")))  # fmt: skip
    assert CODEGEN.joinpath("__init__.py").is_file() and not loose, loose
    private = []
    for path in sorted(CODEGEN.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        aliases = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and _sibling(node.module, node.level):
                private += [f"{path.name}: {a.name}" for a in node.names if a.name.startswith("_")]
                aliases |= {a.asname or a.name for a in node.names}
            elif isinstance(node, ast.Import):
                aliases |= {a.asname or a.name for a in node.names
                            if a.name.startswith("sciml_bench.problem.codegen.")}  # fmt: skip
        private += [
            f"{path.name}: {node.value.id}.{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id in aliases and node.attr.startswith("_")
        ]  # fmt: skip
    assert not private, f"private names used across codegen modules: {private}"
