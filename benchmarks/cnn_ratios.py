"""Training time and throughput of each CNN variant as ratios to torch-eager, from one run.

Each variant trains in its own fresh worker (the runner's executor),
one after the other, so the ratios come from the same machine state. Usage::

    python benchmarks/cnn_ratios.py --quick            # CI sizes, seconds per variant
    python benchmarks/cnn_ratios.py --device cuda      # the ApX-sized GPU run
    python benchmarks/cnn_ratios.py --quick --json out.json

A ratio above 1 means slower (time) or faster (throughput) than torch-eager.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from sciml_bench.cnn import jobs, variants
from sciml_bench.run.runner import run_job_once


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def table(records: list[dict]) -> str:
    ref = next((r for r in records if r["backend"] == "torch-eager" and r["status"] == "ok"), None)
    head = (
        f"{'variant':<14} {'status':<11} {'device':<6} {'first step s':>12} {'warm-up s':>10} "
        f"{'train s':>9} {'x eager':>8} {'img/s':>9} {'x eager':>8} {'acc':>6} {'RAM MB':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in records:
        ok = r["status"] == "ok"
        t_ratio = r["train_s"] / ref["train_s"] if ok and ref else None
        ips_ratio = r["throughput_ips"] / ref["throughput_ips"] if ok and ref else None
        lines.append(
            f"{r['backend']:<14} {r['status']:<11} {r['device'] or '-':<6} "
            f"{_fmt(r['time_to_first_step_s'], '12.2f')} {_fmt(r['warmup_epoch_s'], '10.2f')} "
            f"{_fmt(r['train_s'], '9.3f')} {_fmt(t_ratio, '8.2f')} "
            f"{_fmt(r['throughput_ips'], '9.0f')} {_fmt(ips_ratio, '8.2f')} "
            f"{_fmt(r['accuracy'], '6.3f')} {_fmt(r['ram_max_mb'], '7.0f')}"
        )
        if r["reason"]:
            lines.append(f"{'':<14} {r['reason'][:200]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="CI sizes")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--dataset", default="synthetic", choices=("synthetic", "digits"))
    p.add_argument("--variants", default=",".join(variants()), help="comma-separated")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=JSON",
        help="config override, e.g. --set epochs=3 --set conv_channels=[8,8]",
    )
    p.add_argument("--json", help="also write the raw records here")
    p.add_argument("--threads", type=int, default=None,
                   help="one thread budget for every framework (as `sciml-bench run --threads`)")
    args = p.parse_args(argv)

    overrides = {k: json.loads(v) for k, v in (s.split("=", 1) for s in args.set)}
    wanted = args.variants.split(",")
    todo = [
        j for j in jobs(args.quick, args.device, args.dataset, overrides) if j["variant"] in wanted
    ]
    cfg = todo[0]["config"]
    print(
        f"preset {todo[0]['preset']}, {args.dataset} {cfg['image_size']}x{cfg['image_size']}"
        f"x{cfg['channels']}, batch {cfg['batch_size']}, {cfg['epochs']} measured epochs of "
        f"{cfg['steps_per_epoch']} steps (+{cfg['warmup_epochs']} warm-up), "
        f"{os.cpu_count()} CPUs, threads {args.threads or 'library default'}",
        flush=True,
    )
    records = []
    for job in todo:
        print(f"  running {job['variant']} ...", file=sys.stderr, flush=True)
        records.append(run_job_once(job, threads=args.threads))
    print(table(records))
    loads = [
        r["settings"].get(k)
        for r in records
        for k in ("loadavg_1min_start", "loadavg_1min_end")
        if r.get("settings") and r["settings"].get(k) is not None
    ]
    if loads:
        busy = max(loads) > (os.cpu_count() or 1)
        print(
            f"1-min load average during the runs: {min(loads):.1f} to {max(loads):.1f}"
            + (" -- the machine was busy; these timings are not reliable" if busy else "")
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    return 0 if all(r["status"] in ("ok", "unavailable") for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
