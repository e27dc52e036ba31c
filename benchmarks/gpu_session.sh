#!/usr/bin/env bash
# The GPU checks through the device tool, in two halves (benchmarks/README.md, "On the
# GPU machine"):
#
#   bash benchmarks/gpu_session.sh prepare     # here: the wheels the GPU image lacks
#   bash benchmarks/gpu_session.sh --steps ode,tests,fuzz    # there, carry [".whl"]
#
# `prepare` downloads torchode and what it needs (the GPU machine's image has neither, and
# nothing can be downloaded there) at the versions constraints.txt pins, into .whl/
# (git-ignored, so the device call must name it in `carry`). Anything else: installs the
# carried wheels and the project there with no downloads, then runs gpu_checks.py with
# those arguments, its results and log into $OUT.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
if [ "${1:-}" = prepare ]; then
  pins=$(grep -E '^(torchode|torchtyping|typeguard)==' constraints.txt) || exit 2
  # shellcheck disable=SC2086  # one argument per pin
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux2014_x86_64 -d .whl $pins || exit 2
  ls -l .whl
  exit 0
fi
# Refuse before installing anything where there is no GPU (the project is importable
# from the repository root; NVML comes with nvidia-ml-py, which the GPU image has).
if ! python3 -c "import sys; from sciml_bench.measure.memory import gpu_count; sys.exit(0 if gpu_count() else 2)"; then
  echo "gpu_session: no NVIDIA GPU visible (NVML sees none); run this on the GPU machine" \
       "(here, only 'bash benchmarks/gpu_session.sh prepare')" >&2
  exit 2
fi
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
else
  echo "gpu_session: no wheels in .whl/: torchode's rows will say unavailable" \
       "(run 'bash benchmarks/gpu_session.sh prepare' here and carry .whl)" >&2
fi
python3 -m pip install --no-deps --no-build-isolation --no-index -q -e . || exit 3
export PYTHONUNBUFFERED=1
python3 benchmarks/gpu_checks.py --out "${OUT:-/tmp/gpu-checks}" "$@"
