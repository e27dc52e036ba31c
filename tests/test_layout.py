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


def test_the_readme_layout_table_names_every_module() -> None:
    """Each module under a layer's folder is named in its row of the README's Layout
    table, so a reader finds where a backend, a metric or a schema field lives."""
    readme = (PKG.parent / "README.md").read_text()
    rows = {ln.split("|")[1].strip().strip("`"): ln for ln in readme.splitlines()
            if ln.startswith("| `sciml_bench/")}  # fmt: skip
    missing = []
    for package in LAYERS:
        row = rows.get(f"sciml_bench/{package}/")
        assert row is not None, f"README's Layout table has no row for sciml_bench/{package}/"
        for path in sorted((PKG / package).glob("*.py")):
            if path.name != "__init__.py" and f"`{path.name}`" not in row:
                missing.append(f"{package}/{path.name}")
    assert not missing, f"not in the README's Layout table: {missing}"
