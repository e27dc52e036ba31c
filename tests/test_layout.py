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


#: the modules of ``sciml_bench/cli/`` that import the problem or backend layers, and why:
#: each presents what a problem or a backend is (or turns their errors into one line).
#: The ``run`` command's modules are none of them: it asks ``run/`` for its plan and prints
#: what comes back (issue 54)
CLI_READS_TO_PRINT = {
    "catalogue": "`list` prints the problems and the backends: availability, solvers, defaults",
    "check": "`check` prints a problem's equations, the backends that run it, a timed solve",
    "codegen": "`codegen` prints a problem's generated source and a backend's whole program",
    "julia": "`julia setup`/`status` print where Julia is and what is set up (julia_env)",
    "main": "turns the problem layer's errors (ProblemError, ReferenceError) into one line",
    "options": "help texts' backend names; a problem by name or file, at a size, for check, "
               "codegen, reference and import",
    "reference": "`reference` builds and prints a problem's reference",
    "rejudge": "`rejudge` rebuilds each row's problem and reference and prints what moved",
    "sbml": "`import` and `export-sbml` write a problem file or an SBML document",
}  # fmt: skip
#: the ``run`` command's modules: they parse, call ``run/`` and print
RUN_PATH = ("run", "run_plan")
#: what the run path takes from ``cli/options.py``: errors, help texts, option decorators
RUN_PATH_SHARED = {"UserError", "BACKEND_NAMES", "comma_list", "gradient_rtol_option",
                   "load_limit_option", "sbml_set_option"}  # fmt: skip


def _reads_problems_or_backends(deps: set[str]) -> set[str]:
    return {m for m in deps if m.startswith(("sciml_bench.problem", "sciml_bench.backends"))}


def test_the_command_line_reads_problems_and_backends_only_to_print_them() -> None:
    """No module of ``cli/`` imports ``problem/`` or ``backends/`` (at module level or in a
    function) but the printing commands named, with their reasons, in
    :data:`CLI_READS_TO_PRINT`; an entry whose module no longer imports them goes too."""
    cli = {n.removeprefix("sciml_bench.cli."): deps for n, deps in _graph().items()
           if n.startswith("sciml_bench.cli.")}  # fmt: skip
    unexplained = [f"cli/{name}.py imports {', '.join(sorted(reads))}"
                   for name, deps in sorted(cli.items())
                   if (reads := _reads_problems_or_backends(deps))
                   and name not in CLI_READS_TO_PRINT]  # fmt: skip
    assert not unexplained, "\n".join(unexplained)
    stale = [n for n in CLI_READS_TO_PRINT if not _reads_problems_or_backends(cli.get(n, set()))]
    assert not stale, f"CLI_READS_TO_PRINT names modules that no longer need it: {stale}"


def test_the_run_command_plans_and_loads_nothing_itself() -> None:
    """``run``'s modules import neither ``problem/`` nor ``backends/``, reach ``cli/`` only
    for the shared errors, help texts and option decorators, and so get their problems,
    references and compiled programs only through ``run/`` (``run/plan.py``,
    ``run/execute.py``): the data goes down and comes back only as what is printed."""
    g = _graph()
    assert not set(RUN_PATH) & set(CLI_READS_TO_PRINT)
    for name in RUN_PATH:
        module = f"sciml_bench.cli.{name}"
        assert not _reads_problems_or_backends(g[module]), (module, g[module])
        other_cli = {m for m in g[module] if m.startswith("sciml_bench.cli.")}
        assert other_cli <= {f"sciml_bench.cli.{n}" for n in (*RUN_PATH, "options")}, other_cli
        tree = ast.parse((PKG / "cli" / f"{name}.py").read_text())
        shared = {a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                  and node.module == "sciml_bench.cli.options" for a in node.names}  # fmt: skip
        assert shared <= RUN_PATH_SHARED, (module, shared - RUN_PATH_SHARED)


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
