"""Bare torchdiffeq twins of the suite's problems, written as a torch user writes them.

The vector field is an ``nn.Module`` holding its parameters (``nn.Linear`` layers for the
spiral), ``odeint`` under ``torch.no_grad()`` for a solve and ``loss.backward()`` for a
gradient, timed with ``time.perf_counter``. The problem's data come from the JSON file on
the command line, so the twin solves exactly the suite's problem; no sciml-bench code is
imported.

    python _bare_torchdiffeq.py CONFIG.json REPEATS

Prints one JSON line: raw ``solve`` and ``grad`` timings in seconds.
"""

import json
import sys
import time

import torch
import torchdiffeq
from _bare_pin import pin_as_the_suite
from torch import nn

torch.set_default_dtype(torch.float64)


class LotkaVolterra(nn.Module):
    def __init__(self, theta):
        super().__init__()
        self.theta = nn.Parameter(torch.tensor(theta))

    def forward(self, t, u):
        a, b, c, d = self.theta
        x, y = u
        return torch.stack([a * x - b * x * y, -c * y + d * x * y])


class Robertson(nn.Module):
    def __init__(self, theta):
        super().__init__()
        self.k = nn.Parameter(torch.tensor(theta))

    def forward(self, t, y):
        y1, y2, y3 = y
        k1, k2, k3 = self.k
        return torch.stack([
            -k1 * y1 + k3 * y2 * y3,
            k1 * y1 - k2 * y2**2 - k3 * y2 * y3,
            k2 * y2**2,
        ])


class Spiral(nn.Module):
    """u.^3 -> Dense(2, 50, tanh) -> Dense(50, 2)."""

    def __init__(self, theta):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 50), nn.Tanh(), nn.Linear(50, 2))
        th = torch.tensor(theta)
        with torch.no_grad():
            self.net[0].weight.copy_(th[:100].reshape(50, 2))
            self.net[0].bias.copy_(th[100:150])
            self.net[2].weight.copy_(th[150:250].reshape(2, 50))
            self.net[2].bias.copy_(th[250:252])

    def forward(self, t, y):
        return self.net(y**3)


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    repeats = int(sys.argv[2])
    func = {"lotka-volterra": LotkaVolterra, "robertson": Robertson, "spiral": Spiral}[
        cfg["rhs"]](cfg["theta0"])
    y0 = torch.tensor(cfg["y0"])
    # odeint returns the state at t[0]: start the grid at t0 unless it is a save point
    first = cfg["t_save"][0] != cfg["t0"]
    t = torch.tensor(([cfg["t0"]] if first else []) + cfg["t_save"])
    W, O = torch.tensor(cfg["W"]), torch.tensor(cfg["O"])
    kw = dict(rtol=cfg["rtol"], atol=cfg["atol"], method=cfg["solver"])

    def solve():
        with torch.no_grad():
            return torchdiffeq.odeint(func, y0, t, **kw)

    def grad():
        func.zero_grad(set_to_none=True)
        ys = torchdiffeq.odeint(func, y0, t, **kw)[int(first):]
        loss = torch.sum(W * (ys - O) ** 2)
        loss.backward()
        return loss

    out = {}
    kinds = (("solve", solve), ("grad", grad))
    for _, fn in kinds:
        fn()  # first call: the suite's first solve, then its first gradient
    pin_as_the_suite()
    for kind, fn in kinds:
        fn()  # warm-up, as the suite does
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        out[kind] = samples
    print(json.dumps(out))


if __name__ == "__main__":
    main()
