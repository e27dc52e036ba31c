"""A run's options checked against what exists, before anything runs: the backends named
and what they offer, the devices, what the named problems are (an option none of them uses
is an error), ``--train`` and ``--dt``, the first ``--sizes`` value.

Every refusal is a :class:`~sciml_bench.run.options.RunError` with the message the command
line prints (exit code 2); notes (an option only some targets use, ``auto``'s choice of
device) go through ``say``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sciml_bench.run.options import RunError, RunOptions
from sciml_bench.run.problems import at_size

#: where a check's notes go (the command line passes stderr)
Say = Callable[[str], None]

#: the kinds of target a run can name, as the errors describe them
TARGETS = {
    "single": "single-trajectory problems (e.g. stiff-robertson)",
    "ensemble": "problems with an [ensemble] section (e.g. ensemble-lorenz)",
    "sized": "array problems with [sizes] (e.g. stiff-robertson-groups)",
    "cnn": "the CNN baselines (`cnn`)",
    "train": "training runs (--train)",
}


def known_backends(asked: Sequence[str], cnn_variants: Sequence[str]) -> list[str]:
    """The ODE backends the run plans (those named, else every one); a name that is neither
    a backend nor a CNN variant of this run is a :class:`RunError`."""
    from sciml_bench import backends

    known = backends.names() + list(cnn_variants)
    for n in asked:
        if n not in known:
            raise RunError(f"unknown backend {n!r}; choose from {', '.join(known)}")
    return [n for n in asked if n in backends.REGISTRY] or backends.names()


def stiff_capable(o: RunOptions, names: list[str], say: Say) -> list[str]:
    """A run of ``--sbml`` models alone, with no backend named, leaves out the libraries
    with no stiff solver (an import is stiff by default; their explicit solvers spend the
    budget or the step bound on every such model, docs/real-models.md, "The seven models",
    "Why the budgets"), saying so; named with ``-b`` they run."""
    from sciml_bench import backends

    if o.backend_names or not o.sbml_files or o.problems or o.problem_files:
        return names
    explicit = [n for n in names
                if not any(s.stiff for s in backends.get(n).solvers().values())]  # fmt: skip
    if explicit:
        say(f"note: --sbml models are stiff by default: left out {', '.join(explicit)} (no "
            "stiff solver; they would spend the budget or the step bound); name them with -b "
            "to run them")  # fmt: skip
    return [n for n in names if n not in explicit]


def check_offered(names: list[str], solvers: Sequence[str], gradients: Sequence[str]) -> None:
    """Each --solver and --gradient must be offered by at least one chosen backend."""
    from sciml_bench import backends

    offered = {n: backends.get(n) for n in names}
    for flag, wanted, pool in (
        ("--solver", solvers, {s for b in offered.values() for s in b.solvers()}),
        ("--gradient", gradients, {g for b in offered.values() for g in b.gradient_methods}),
    ):
        for w in wanted:
            if w not in pool and not (flag == "--gradient" and w == "all"):
                raise RunError(
                    f"{flag} {w!r} is offered by none of {', '.join(names)}; "
                    f"choose from {', '.join(sorted(pool))}"
                )


def check_applies(o: RunOptions, loaded: list[Any], with_cnn: bool, say: Say) -> None:
    """An option none of the named targets uses is an error (it would be silently
    ignored); one that only some use gets a note naming the others."""
    kinds: dict[str, list[str]] = {"cnn": ["cnn"] if with_cnn else []}
    for p in loaded:
        kind = "ensemble" if p.ensemble is not None else "sized" if p.laddered else "single"
        kinds.setdefault(kind, []).append(p.name)
    if o.train:
        _check_trainable(loaded, with_cnn)
        kinds = {"train": [p.name for p in loaded]}
    for flag, (value, applies) in _given(o).items():
        if not value:  # not given (every numeric option here is >= 1)
            continue
        if o.train and "train" not in applies:
            raise RunError(f"{flag} does not apply to --train (training runs the problem's "
                           "[training] section at its tolerances, one worker per backend)")
        if not any(kinds.get(k) for k in applies):
            what = " or ".join(TARGETS[k] for k in applies)
            raise RunError(f"{flag} applies to {what}; none is named in this run")
        others = [n for k, names in kinds.items() if k not in applies for n in names]
        if others:
            say(f"note: {flag} applies to {' or '.join(TARGETS[k] for k in applies)}; "
                f"{', '.join(others)} run(s) without it")  # fmt: skip


def _given(o: RunOptions) -> dict[str, tuple[Any, tuple[str, ...]]]:
    """Each option a target may not use: its value and the kinds of target it applies to."""
    return {
        "--tolerances": (o.tolerances, ("single", "sized")),
        "--sweep": (o.sweep, ("single",)),
        "--cold": (o.cold, ("single", "ensemble", "sized")),
        "--sizes": (o.sizes, ("ensemble", "sized")),
        "--jacobian": (o.jacobians, ("sized",)),
        "--repeats": (o.repeats, ("single", "ensemble", "sized", "cnn")),
        "--solver": (o.solvers, ("single", "ensemble", "sized", "train")),
        "--gradient": (o.gradients, ("single", "ensemble", "sized", "train")),
        "--max-steps": (o.max_steps, ("single", "ensemble", "sized", "train")),
        "--dtype": (o.dtype not in (None, "float64"), ("single",)),
        "--dt": (o.dt, ("single",)),
        **{f"--{k.replace('_', '-')}": (getattr(o, attr), ("cnn",)) for k, attr in (
            ("image_size", "image_size"), ("channels", "channels"), ("batch_size", "batch_size"),
            ("steps", "steps"), ("epochs", "epochs"), ("model", "cnn_model"),
            ("pipeline", "pipeline"), ("precision", "precisions"),
            ("target_accuracy", "target_accuracy"), ("eval_every", "eval_every"))},
        "--dataset": (o.dataset != "synthetic", ("cnn",)),
    }  # fmt: skip


def _check_trainable(loaded: list[Any], with_cnn: bool) -> None:
    """``--train`` needs single-trajectory problems with a ``[training]`` section."""
    from sciml_bench.problem import spec

    if with_cnn:
        raise RunError("--train trains problems' [training] sections; the CNN baselines "
                       "(`cnn`) train with --target-accuracy: run them without --train")
    for p in loaded:
        if p.ensemble is None and p.training is not None:
            continue
        trainable = []
        for name in spec.available_problems():
            try:
                if spec.load(name).training is not None:
                    trainable.append(name)
            except spec.ProblemError:
                continue
        why = "is an ensemble problem" if p.ensemble is not None else "has no [training] section"
        raise RunError(f"--train: {p.name} {why}; train one that has a [training] section "
                       f"({', '.join(trainable) or 'none shipped'}) or add one (docs/training.md)")


def ode_devices(requests: list[str], names: list[str], say: Say) -> list[str]:
    """Concrete devices for the ODE cases; ``auto``'s choice is said. ``cuda`` needs a
    GPU and, for every chosen backend that can use one, a CUDA build of its framework
    (probed in a fresh pinned process): otherwise a one-line error with the fix."""
    from sciml_bench import backends
    from sciml_bench.backends.base import probe_cuda
    from sciml_bench.measure import device
    from sciml_bench.measure.memory import gpu_count

    try:
        devices, note = device.resolve(requests, gpu_count() if requests != ["cpu"] else 0)
    except device.DeviceError as e:
        raise RunError(str(e)) from None
    if note:
        say(note)
    if "cuda" in devices:
        for name in names:
            b = backends.get(name)
            if "cuda" not in b.devices or not b.availability().ok:
                continue  # CPU-only: runs on the CPU and says so; unavailable: its own row
            missing = probe_cuda(name)
            if missing:
                raise RunError(f"--device cuda: {missing[0]}; fix: {missing[1]}")
    return devices


def check_steps(o: RunOptions, names: list[str]) -> None:
    """``--dt`` exactly when every chosen solver is a fixed-step one: a fixed-step solver
    without it, or an adaptive one (named, or a backend's default because no --solver
    applies to it) with it, is an error; a fixed step has no tolerances to sweep."""
    from sciml_bench import backends

    for name in names:
        offered = backends.get(name).solvers()
        chosen = [s for s in o.solvers if s in offered]
        for s in chosen:
            if offered[s].fixed_step and o.dt is None:
                raise RunError(f"--solver {s} is a fixed-step solver: give its step with --dt "
                               "(e.g. --dt 0.01)")  # fmt: skip
        if o.dt is None:
            continue
        fixed = [s for s, info in offered.items() if info.fixed_step]
        adaptive = [s for s in chosen if not offered[s].fixed_step]
        if adaptive or not chosen:
            what = (f"{name}'s {adaptive[0]} is adaptive" if adaptive else
                    f"{name} would run its adaptive default (no --solver names one of its solvers)")  # fmt: skip
            hint = (f"pick a fixed-step solver (--solver {', '.join(fixed)})" if fixed
                    else f"leave {name} out (-b): it offers no fixed-step solver")  # fmt: skip
            raise RunError(f"--dt applies to fixed-step solvers; {what}: {hint}")
    if o.dt is not None and (o.tolerances or o.sweep):
        raise RunError("--dt runs fixed steps, which have no error control: drop "
                       f"{'--sweep' if o.sweep else '--tolerances'} (or --dt)")


def check_first_sizes(loaded: list[Any], sizes: list[int] | None) -> None:
    """Each array problem's file at the first --sizes value, before the results file is
    made (a size the file refuses, e.g. a shift longer than the grid, leaves no empty
    file); a later size that fails is a row of its ladder."""
    for p in loaded:
        if sizes and p.ensemble is None and p.laddered is not None and p.laddered.size != sizes[0]:
            at_size(p, sizes[0])
