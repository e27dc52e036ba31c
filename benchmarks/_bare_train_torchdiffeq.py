"""Bare torchdiffeq training loop for the spiral, written as its ``examples/ode_demo.py``
writes one: an ``nn.Module`` vector field (``nn.Linear`` layers on ``y**3``), then per
iteration ``optimizer.zero_grad()``, ``odeint``, the loss, ``loss.backward()``,
``optimizer.step()``; ``torch.optim.Adam`` with the suite's constants instead of the demo's
RMSprop, the full batch, the suite's loss. No sciml-bench code is imported.

    python _bare_train_torchdiffeq.py CONFIG.json

Prints one JSON line: the raw ``seconds`` of every iteration and its ``loss``.
"""

import json
import sys
import time

import torch
import torchdiffeq
from torch import nn

torch.set_default_dtype(torch.float64)


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
    func = Spiral(cfg["theta0"])
    y0 = torch.tensor(cfg["y0"])
    # odeint returns the state at t[0]: start the grid at t0 unless it is a save point
    first = cfg["t_save"][0] != cfg["t0"]
    t = torch.tensor(([cfg["t0"]] if first else []) + cfg["t_save"])
    W, O = torch.tensor(cfg["W"]), torch.tensor(cfg["O"])
    optimizer = torch.optim.Adam(func.parameters(), lr=cfg["learning_rate"],
                                 betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"])
    seconds, losses = [], []
    for _ in range(cfg["iterations"]):
        t0 = time.perf_counter()
        optimizer.zero_grad()
        pred_y = torchdiffeq.odeint(func, y0, t, rtol=cfg["rtol"], atol=cfg["atol"],
                                    method="dopri5")[int(first):]
        loss = torch.sum(W * (pred_y - O) ** 2)
        loss.backward()
        optimizer.step()
        seconds.append(time.perf_counter() - t0)
        losses.append(loss.item())
    print(json.dumps({"seconds": seconds, "loss": losses}))


if __name__ == "__main__":
    main()
