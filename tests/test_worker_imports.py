"""A worker never imports sympy: building a case (single or ensemble) loads generated
source without the code generator, so a backend's build phase of time to first gradient
is its own cost. Each backend is built in a fresh interpreter, as a worker builds it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sciml_bench import backends
from sciml_bench.problem import ensemble as ens
from sciml_bench.problem import reference, spec

#: modules of the problem layer that import sympy; a worker must import none of them
SYMPY_LAYER = ("sciml_bench.problem.codegen", "sciml_bench.problem.spec",
               "sciml_bench.problem.expr", "sciml_bench.problem.reference",
               "sciml_bench.problem.ensemble_reference")  # fmt: skip

#: the worker's own steps, up to and including build (``run/ode.py`` and
#: ``run/ensemble.py``), for an ODE case and a 4-member ensemble of the same problem
DRIVER = """
import json, sys
from sciml_bench.run.events import Events
from sciml_bench.run.jobs import kind_of  # what the worker imports before the job runs
job = json.load(open(sys.argv[1]))
kind_of(job)
from sciml_bench.run import ensemble as ensemble_kind, ode
backend = ode.load_backend(job, Events(sys.argv[2]))
after_load = "sympy" in sys.modules
from sciml_bench.problem import ensemble as ens
from sciml_bench.problem.compiled import CompiledProblem
problem = CompiledProblem.from_json(job["problem"])
options = ensemble_kind._options(job, "cpu")
backend.build(problem, options)
after_build = "sympy" in sys.modules
batch = ens.batch(ens.from_json(job["ensemble"]), problem.y0, problem.n_params, 4,
                  ens.load_observations(None, 4))
backend.build_ensemble(problem, options, batch, backend.ensemble_semantics[0])
print(json.dumps({"after_load": after_load, "after_build": after_build,
                  "after_ensemble": "sympy" in sys.modules,
                  "layer": sorted(m for m in sys.modules if m in sys.argv[3].split(","))}))
"""

#: backends whose library's own import loads sympy (torchode 1.0.1's Tsit5 derives its
#: interpolation weights with sympy at import): that cost is the library's, in its import
LIBRARY_IMPORTS_SYMPY = {"torchode"}


@pytest.mark.parametrize("name", ["scipy", "diffrax", "torchdiffeq", "torchode", "julia"])
def test_building_a_case_never_imports_sympy(name: str, tmp_path: Path) -> None:
    backend = backends.get(name)
    if name == "julia":
        pytest.skip("needs Julia, which is not installed here; the Julia backend loads "
                    "its generated source in Julia (define_rhs) and imports no sympy layer")
    av = backend.availability()
    if not av.ok:
        pytest.skip(f"{name}: {av.reason}")
    problem = spec.load("ensemble-lorenz")
    compiled = reference.compile_problem(problem, None)
    options = {"solver": backend.default_solver(problem.stiff),
               "gradient_method": backend.default_gradient(compiled), "rtol": compiled.rtol,
               "atol": compiled.atol, "max_steps": compiled.max_steps, "extra": {}}
    job = {"kind": "ode", "backend": name, "problem": compiled.to_json(),
           "ensemble": ens.to_json(problem.ensemble), "t_spawn": 0.0, "options": options}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    r = subprocess.run([sys.executable, "-c", DRIVER, str(path), str(tmp_path / "ev.jsonl"),
                        ",".join(SYMPY_LAYER)], capture_output=True, text=True, env=env,
                       timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["layer"] == []  # no sympy layer module, whatever the library imports
    if name in LIBRARY_IMPORTS_SYMPY:
        assert got["after_load"], f"{name} no longer imports sympy itself: drop it from the list"
    else:
        assert not got["after_load"] and not got["after_build"] and not got["after_ensemble"]


#: the files a worker runs an ODE or ensemble job through, before and after build
WORKER_FILES = ("run/worker.py", "run/jobs.py", "run/events.py", "run/ode.py",
                "run/ensemble.py", "backends/base.py", "backends/scipy.py",
                "backends/diffrax.py", "backends/torchdiffeq.py", "backends/torchode.py",
                "backends/torch_device.py", "backends/julia.py", "backends/julia_env.py")  # fmt: skip


def test_no_module_a_worker_imports_reaches_sympy() -> None:
    """Every ``sciml_bench`` module named by an import statement in the worker's files
    (inside functions too: ``work`` imports lazily), imported in a fresh process."""
    import ast

    root = Path(__file__).resolve().parents[1] / "sciml_bench"
    names: set[str] = set()
    for rel in WORKER_FILES:
        # a job kind's ``record`` runs in the parent, which may import the reference
        tops = [n for n in ast.parse((root / rel).read_text()).body
                if not (isinstance(n, ast.FunctionDef) and n.name == "record")]  # fmt: skip
        for node in (sub for top in tops for sub in ast.walk(top)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sciml_bench"):
                names.add(node.module)  # type: ignore[arg-type]
                names.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                names.update(a.name for a in node.names if a.name.startswith("sciml_bench"))
    code = (
        "import importlib, importlib.util, json, sys\n"
        f"for m in {sorted(names)!r}:\n"
        "    if importlib.util.find_spec(m.rpartition('.')[0] or m) is not None:\n"
        "        try:\n"
        "            importlib.import_module(m)\n"
        "        except ModuleNotFoundError:\n"
        "            pass  # a name imported from a module, not a submodule\n"
        "print(json.dumps(sorted(m for m in sys.modules if m == 'sympy' or m in "
        f"{list(SYMPY_LAYER)!r})))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "sciml_bench.problem.ensemble" in names and "sciml_bench.run.ode" in names
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []
