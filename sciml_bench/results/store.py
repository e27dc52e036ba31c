"""The results file: HDF5, versioned schema, written so nothing completed is lost.

Schema (``schema_version`` 2; version 1 files are still read, see :func:`upgrade_v1`)::

    /                      attrs: format="sciml-bench-results", schema_version,
                                  run_id, created (ISO 8601 UTC), command,
                                  status ("running" | "complete" | "interrupted" | "failed"),
                                  interrupted_by (SIGINT | SIGTERM | SIGHUP; interrupted
                                  runs written since it was added),
                                  sciml_bench_version
    /environment           attrs: one JSON string per key (see environment.py)
    /cases/NNNNNN          one group per case record, in run order:
        attrs              scalar fields (str, int, float, bool)
        datasets           numeric arrays (raw samples, solutions, gradients)
        attr _json         JSON object of the fields that are dicts, string lists
                           or None (e.g. ``gradient`` keyed by parameter name)

A record's keys are documented in README.md ("Results schema"). Raw samples
are stored; medians and IQRs are computed when reading (:func:`summarize`).

Durability: after every case the whole file is written to a temporary file
in the same folder, fsynced and renamed over the previous one, so at any
instant the path holds a complete, valid file with every finished case,
whether the run crashes, is killed or is interrupted.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import secrets
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sciml_bench import __version__
from sciml_bench.measure.clock import iqr, median
from sciml_bench.measure.environment import environment_hardware

FORMAT = "sciml-bench-results"
SCHEMA_VERSION = 2
#: raw-sample fields and the summary keys derived from them when reading
SAMPLE_FIELDS = {"ttfg_samples": "ttfg_s", "solve_samples": "solve_s", "grad_samples": "grad_s",
                 "iteration_samples": "iteration_s"}  # fmt: skip


class ResultsError(ValueError):
    """A file that is not a readable sciml-bench results file."""


@dataclass
class Run:
    path: Path
    meta: dict[str, Any]
    environment: dict[str, Any]
    records: list[dict[str, Any]] = field(default_factory=list)


def new_path(folder: str | os.PathLike[str], label: str) -> Path:
    """A fresh, unique file name: concurrent runs never collide."""
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)[:60]
    return Path(folder) / f"{safe}-{stamp}-{os.getpid()}-{secrets.token_hex(3)}.h5"


def _is_numeric_array(v: Any) -> bool:
    if isinstance(v, np.ndarray):
        return v.dtype.kind in "biuf"
    if not isinstance(v, list | tuple) or not v:
        return False
    try:
        a = np.asarray(v, dtype=float)
    except (TypeError, ValueError):
        return False
    return a.dtype.kind == "f" and a.ndim <= 3


def _write_record(group: Any, record: dict[str, Any]) -> None:
    as_json: dict[str, Any] = {}
    for k, v in record.items():
        if isinstance(v, bool | int | float | str | np.integer | np.floating) and not (
            isinstance(v, str) and len(v) > 60000
        ):
            group.attrs[k] = v
        elif _is_numeric_array(v):
            a = np.asarray(v)  # integer lists (a curve's step counts) stay integers
            group.create_dataset(k, data=a if a.dtype.kind in "iu" else np.asarray(v, dtype=float))
        else:
            as_json[k] = v
    group.attrs["_json"] = json.dumps(as_json, default=_json_default)


def _json_default(x: Any) -> Any:
    if hasattr(x, "tolist"):
        return x.tolist()
    return str(x)


def _read_record(group: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {}
    for k, v in group.attrs.items():
        if k == "_json":
            continue
        if isinstance(v, np.generic):
            v = v.item()
        rec[k] = v
    for k, ds in group.items():
        rec[k] = ds[()].tolist()
    rec.update(json.loads(group.attrs.get("_json", "{}")))
    return rec


class ResultsWriter:
    """Holds a run's records and rewrites the file atomically after each one."""

    def __init__(self, path: Path, environment: dict[str, Any], command: str):
        self.path = Path(path)
        self.environment = environment
        self.records: list[dict[str, Any]] = []
        self.meta = {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "run_id": self.path.stem,
            "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "command": command,
            "status": "running",
            "sciml_bench_version": __version__,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.flush()

    def add(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        self.flush()

    def finish(self, status: str, interrupted_by: str | None = None) -> None:
        """Set the run's final status; an interrupted run also records the signal."""
        self.meta["status"] = status
        if interrupted_by:
            self.meta["interrupted_by"] = interrupted_by
        self.flush()

    def flush(self) -> None:
        # Ctrl-C (and SIGTERM/SIGHUP) is held back until the new file is in place:
        # a flush is never half-done, and the interruption arrives right after it.
        with signals_deferred():
            self._flush()

    def _flush(self) -> None:
        import h5py

        # Not mkstemp: its 0600 would survive the rename, and colleagues on a shared
        # machine could not read the results. h5py creates the file, so the umask applies.
        tmp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(6)}.tmp")
        try:
            with h5py.File(tmp, "x") as f:
                for k, v in self.meta.items():
                    f.attrs[k] = v
                env = f.create_group("environment")
                for k, v in self.environment.items():
                    env.attrs[k] = json.dumps(v, default=_json_default)
                cases = f.create_group("cases")
                for i, rec in enumerate(self.records):
                    _write_record(cases.create_group(f"{i:06d}"), rec)
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Block SIGINT, SIGTERM and SIGHUP in this thread (main thread only); a pending
    one fires on exit. For work an interruption must not cut in half: a results file's
    flush, a worker's temporary folder's removal."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def load(path: str | os.PathLike[str], as_frame: bool = False) -> Any:
    """Read a results file: a :class:`Run` (records summarized), or a pandas
    DataFrame of the records when ``as_frame`` (pandas, the ``report`` extra: without
    it a one-line :class:`~sciml_bench.results.extras.MissingExtra`)."""
    if as_frame:
        from sciml_bench.results.extras import require

        pd = require("pandas", "report", "sciml_bench.results.load(..., as_frame=True)")
        return pd.DataFrame(read(path).records)
    return read(path)


def read(path: str | os.PathLike[str]) -> Run:
    """Read a results file; any damage, in the header or past it, is a one-line
    :class:`ResultsError` that says what to do."""
    try:
        return _read(path)
    except ResultsError as e:
        if "truncated file" in str(e):  # h5py calls it "not an HDF5 file"; say what it is
            raise ResultsError(
                f"{path}: a truncated HDF5 file (cut short, e.g. by an interrupted copy); "
                "copy it again or re-run the benchmark"
            ) from None
        if "not an HDF5 file" in str(e):
            raise ResultsError(f"{e}; pass a results file written by `sciml-bench run`") from None
        raise
    except (OSError, KeyError, RuntimeError, TypeError, ValueError, AttributeError) as e:
        detail = " ".join(str(e).split())[:200]
        raise ResultsError(
            f"{path}: a damaged sciml-bench results file ({type(e).__name__}: {detail}); "
            "re-run the benchmark to write it again"
        ) from None


def _read(path: str | os.PathLike[str]) -> Run:
    import h5py

    p = Path(path)
    if not p.exists():
        raise ResultsError(f"{p}: no such file")
    try:
        f = h5py.File(p, "r")
    except OSError as e:
        raise ResultsError(f"{p}: not an HDF5 file ({e})") from None
    with f:
        if f.attrs.get("format") != FORMAT:
            raise ResultsError(
                f"{p}: an HDF5 file, but not a sciml-bench results file (no format={FORMAT!r})"
            )
        version = int(f.attrs.get("schema_version", 0))
        if version > SCHEMA_VERSION:
            raise ResultsError(
                f"{p}: schema version {version} is newer than this sciml-bench reads "
                f"({SCHEMA_VERSION}); upgrade sciml-bench"
            )
        meta = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in f.attrs.items()}
        env = {k: json.loads(v) for k, v in f["environment"].attrs.items()} if "environment" in f else {}
        records = [summarize(_read_record(f["cases"][k])) for k in sorted(f.get("cases", {}))]
    if version < 2:
        records = [upgrade_v1(r, env) for r in records]
    return Run(p, meta, env, [first_wave_cnn(r) for r in records])


#: what a CNN row meant before the second wave recorded it (docs/results-schema.md)
FIRST_WAVE_CNN = {"model": "small", "pipeline": "device", "precision": "tf32"}


def first_wave_cnn(record: dict[str, Any]) -> dict[str, Any]:
    """A CNN record from before ``model``, ``pipeline`` and ``precision`` were recorded,
    with the first wave's meaning of each, so it is shown and compared as what it was."""
    if record.get("kind") != "cnn" or all(k in record for k in FIRST_WAVE_CNN):
        return record
    return {**FIRST_WAVE_CNN, **record}


def upgrade_v1(record: dict[str, Any], environment: dict[str, Any]) -> dict[str, Any]:
    """A version-1 ODE record with the device keys of version 2, from what the file knows.

    Version 1 recorded no device for ODE cases. A run whose environment lists no GPU
    ran every case on the CPU (``device`` = ``cpu``, ``device_name`` = its CPU model);
    on a machine with a GPU, JAX may have taken it, so the device stays unknown (None).
    ``device_requested`` is None: version 1 had no request. CNN records had the keys.

    Version-1 runs were local, so every record gets the file's hardware label (``compare``
    refuses to pair records whose labels differ; without one it could not tell).
    """
    out = dict(record)
    label = environment_hardware(environment)
    if label and not out.get("hardware") and not environment.get("machines"):
        out["hardware"] = label
    if out.get("kind", "ode") != "ode" or "device" in record:
        return out
    out.setdefault("device_requested", None)
    if environment.get("gpus") == []:
        out["device"], out["device_name"] = "cpu", environment.get("cpu_model")
    else:
        out["device"], out["device_name"] = None, None
    return out


def summarize(record: dict[str, Any]) -> dict[str, Any]:
    """Add medians and IQRs computed from the raw samples."""
    out = dict(record)
    for raw, key in SAMPLE_FIELDS.items():
        samples = record.get(raw) or []
        out[key] = median(samples)
        out[f"{key[:-2]}_iqr"] = iqr(samples)
    if record.get("kind") == "ensemble" and record.get("size"):
        # member-solves (and member-gradients) per second, from the median call
        for key, name in (("solve_s", "throughput"), ("grad_s", "grad_throughput")):
            out[name] = record["size"] / out[key] if out.get(key) else None
    return out

