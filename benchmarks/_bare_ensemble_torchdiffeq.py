"""Bare torchdiffeq twin of the suite's Lorenz ensemble (coupled: torchdiffeq's only
batched form), written as a torch user writes it.

A hand-written batched Lorenz ``nn.Module`` over the stacked ``(n, 3)`` state (one error
norm and one step size for the batch), ``odeint`` under ``torch.no_grad()`` for a solve,
``loss.backward()`` for the gradient w.r.t. the nominal parameters, a CUDA synchronise
before the clock is read on a GPU, ``time.perf_counter``. The members, save times,
tolerances and loss weights come from the JSON file; no sciml-bench code is imported.

    python _bare_ensemble_torchdiffeq.py CONFIG.json DEVICE REPEATS

Prints one JSON line: raw ``solve`` and ``grad`` timings in seconds.
"""

import json
import sys
import time

import torch
import torchdiffeq
from torch import nn

torch.set_default_dtype(torch.float64)


class LorenzBatch(nn.Module):
    def __init__(self, theta, S, A):
        super().__init__()
        self.theta = nn.Parameter(theta)
        self.S, self.A = S, A

    def forward(self, t, u):
        p = self.theta * self.S + self.A
        x, y, z = u[:, 0], u[:, 1], u[:, 2]
        sigma, rho, beta = p[:, 0], p[:, 1], p[:, 2]
        return torch.stack([sigma * (y - x), x * (rho - z) - y, x * y - beta * z], dim=1)


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    device, repeats = torch.device(sys.argv[2]), int(sys.argv[3])
    Y0, S, A, C = (torch.tensor(cfg[k], device=device) for k in ("Y0", "S", "A", "C"))
    func = LorenzBatch(torch.tensor(cfg["theta0"], device=device), S, A)
    # odeint returns the state at t[0]: start the grid at t0 unless it is a save point
    first = cfg["t_save"][0] != cfg["t0"]
    t = torch.tensor(([cfg["t0"]] if first else []) + cfg["t_save"], device=device)
    kw = dict(rtol=cfg["rtol"], atol=cfg["atol"], method=cfg["solver"])
    n = Y0.shape[0]

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def solve():
        with torch.no_grad():
            ys = torchdiffeq.odeint(func, Y0, t, **kw)
        sync()
        return ys

    def grad():
        func.zero_grad(set_to_none=True)
        ys = torchdiffeq.odeint(func, Y0, t, **kw)[int(first) :].permute(1, 0, 2)
        loss = torch.sum(C * ys) / n
        loss.backward()
        sync()
        return loss

    out = {}
    for kind, fn in (("solve", solve), ("grad", grad)):
        fn()  # first call
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
