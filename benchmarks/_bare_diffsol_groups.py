"""A bare pydiffsol twin of ``stiff-robertson-groups``: ROBER copied n times, written as a
pydiffsol user (and diffsol's own ``robertson_ode`` benchmark) writes it.

Hand-written DiffSL with the state stored species by species (``x`` over ``0:n``, ``y``
over ``n:2n``, ``z`` over ``2n:3n``) and the three rate constants shared by every group,
taken as their logs (``lk1`` in, ``k1 { exp(lk1) }``), as the suite's model takes them
(its sensitivities along log k); one ``pydiffsol.Ode``; ``ode.solve_dense`` called in a
loop with ``time.perf_counter``. The gradient is ``ode.solve_fwd_sens`` and the loss's
chain rule in NumPy, ``dL/du_k = Σ_ij 2 W_ij (Y_ij − O_ij) S_k,ij`` with ``u = log k`` (or
``solve_adjoint_fwd`` + ``solve_adjoint_bkwd``). The loss's arrays arrive in the suite's layout (group by group,
``y[3g + s]``) and are put in the model's layout once, before any clock, as a user holds
their data. The problem's data (n, save times, tolerances, parameters, loss arrays,
solver, matrix type, gradient method) come from the JSON file on the command line; no
sciml-bench code is imported.

    python _bare_diffsol_groups.py CONFIG.json REPEATS

Prints one JSON line: raw ``solve`` and ``grad`` timings in seconds (wall), the
process's CPU seconds over each kind's timed loop (``solve_cpu_s``, ``grad_cpu_s``), and
the last gradient call's ``loss`` and ``gradient`` (for the parent's same-work check).
"""

import json
import sys
import time

import numpy as np
import pydiffsol as ds
from _bare_diffsol import loss_and_grad  # the same loss, the same calls


def model(n: int, k: list[float]) -> str:
    """ROBER's kinetics for n groups, species by species (diffsol's robertson_ode), with
    the rates' logs as inputs."""
    lk = np.log(k).tolist()
    return f"""
        in_i {{ lk1 = {lk[0]!r}, lk2 = {lk[1]!r}, lk3 = {lk[2]!r} }}
        k1 {{ exp(lk1) }} k2 {{ exp(lk2) }} k3 {{ exp(lk3) }}
        u_i {{ (0:{n}): x = 1, ({n}:{2 * n}): y = 0, ({2 * n}:{3 * n}): z = 0 }}
        F_i {{
            (0:{n}): -k1 * x_i + k3 * y_i * z_i,
            ({n}:{2 * n}): k1 * x_i - k2 * y_i * y_i - k3 * y_i * z_i,
            ({2 * n}:{3 * n}): k2 * y_i * y_i,
        }}
    """


def make_ode(cfg: dict) -> "ds.Ode":
    """The ``Ode`` of the hand-written model, or of ``cfg["code"]`` where the config holds
    DiffSL (the suite's generated model, to split harness from model)."""
    code = cfg.get("code") or model(cfg["n"], cfg["theta0"])
    ode = ds.Ode(code, scalar_type=ds.f64,
                 matrix_type=getattr(ds, cfg["matrix_type"]), ode_solver=getattr(ds, cfg["solver"]))  # fmt: skip
    ode.rtol, ode.atol = cfg["rtol"], cfg["atol"]
    ode.sens_rtol = ode.param_rtol = cfg["rtol"]
    ode.sens_atol = ode.param_atol = cfg["atol"]
    return ode


def model_layout(a: list, n: int) -> np.ndarray:
    """``(n_save, 3n)`` in the suite's layout (``[3g + s]``) -> the model's ``(3n, n_save)``
    (``[s n + g]``)."""
    a = np.asarray(a)
    return a.reshape(len(a), n, 3).transpose(2, 1, 0).reshape(3 * n, len(a)).copy()


def calls(cfg: dict) -> dict:
    """The timed calls: ``solve()`` and ``grad() -> (L, dL/dlog θ)`` (every parameter of
    the problem is in log space)."""
    ode = make_ode(cfg)
    theta, ts = np.log(cfg["theta0"]), np.asarray(cfg["t_save"])
    W, O = model_layout(cfg["W"], cfg["n"]), model_layout(cfg["O"], cfg["n"])

    grad = loss_and_grad(ode, theta, ts, W, O, cfg["gradient"])
    return {"solve": lambda: ode.solve_dense(theta, ts), "grad": grad}


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    repeats = int(sys.argv[2])
    out = {}
    calls_ = calls(cfg)
    for kind, fn in calls_.items():
        fn()  # first call
        fn()  # warm-up, as the suite's first calls are
        samples = []
        cpu = time.process_time()
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        out[f"{kind}_cpu_s"] = time.process_time() - cpu
        out[kind] = samples
    loss, g = calls_["grad"]()
    out.update(loss=float(loss), gradient=np.asarray(g).tolist())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
