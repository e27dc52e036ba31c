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

A record's keys are documented in docs/results-schema.md. Raw samples
are stored; medians and IQRs are computed when reading (:func:`summarize`).

Durability: the file is created whole (a temporary file, fsynced, renamed into place)
and then stays open for the run: each case is appended as its own group and committed
(:class:`JournaledFile`), never by rewriting the file, so a case costs the same to write
at the end of a long sweep as at its start. A commit is atomic with respect to a kill:
HDF5's in-place metadata updates are journaled at the file's end first, applied, then
the journal is truncated away. So at any instant the path holds a valid file with every
finished case, whether the run crashes, is killed (even inside a commit) or is
interrupted; :func:`read` completes a commit that a kill cut after its journal. Between
commits the file is a plain HDF5 file (format 1.8, no lock held, no "open for writing"
flag) that any HDF5 reader opens, while the run is still writing it. Each commit is
fsynced (``SCIML_BENCH_STORE_FSYNC=0`` leaves that out).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import io
import json
import os
import secrets
import signal
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sciml_bench import __version__
from sciml_bench.measure.clock import iqr, median
from sciml_bench.measure.environment import environment_hardware
from sciml_bench.results.journal import JournaledFile, journal_replayed

FORMAT = "sciml-bench-results"
SCHEMA_VERSION = 2
#: raw-sample fields and the summary keys derived from them when reading
SAMPLE_FIELDS = {"ttfg_samples": "ttfg_s", "solve_samples": "solve_s", "grad_samples": "grad_s",
                 "iteration_samples": "iteration_s"}  # fmt: skip
#: steady raw-sample fields and the per-process medians derived from them when reading
PROCESS_MEDIAN_FIELDS = {"solve_samples": "solve_process_medians",
                         "grad_samples": "grad_process_medians"}  # fmt: skip


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
    """A run's results file, open for the whole run: each record is appended as its own
    group and committed (see "Durability" above); the file is never rewritten whole.

    ``records`` holds what was added, ``environment`` may be changed by the caller and is
    written (the keys that changed) at the next :meth:`add`, :meth:`flush` or :meth:`finish`.
    """

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
        self._written = 0  # records already in the file
        self._attrs: dict[tuple[str, str], Any] = {}  # what each attribute was last set to
        self._file: Any = None
        self._journal: JournaledFile | None = None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with signals_deferred():
            self._create()

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
        """Write what changed since the last commit (new records, changed root and
        environment attributes) and commit it."""
        # Ctrl-C (and SIGTERM/SIGHUP) is held back until the commit is done: a flush is
        # never half-done, and the interruption arrives right after it.
        with signals_deferred():
            self._append()

    def close(self) -> None:
        """Close the file (optional: every commit leaves it complete on disk, and the
        file is closed when the writer is collected or the interpreter exits)."""
        self._closer()
        self._file = None

    def _create(self) -> None:
        import h5py

        # The empty run, its header included, is written whole and renamed into place, so
        # the path never holds half a header (a reader polling a run's folder once found the
        # file renamed in before its format attribute). Not mkstemp: its 0600 would survive
        # the rename, and colleagues on a shared machine could not read the results; h5py
        # creates it, the umask applies.
        tmp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(6)}.tmp")
        try:
            with h5py.File(tmp, "x", libver=LIBVER) as f:
                f.create_group("environment")
                f.create_group("cases")
                self._write_header(f)
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._journal = JournaledFile(self.path)
        self._file = h5py.File(self._journal, "r+", libver=LIBVER)
        _small_metadata_cache(self._file)
        # closed before the interpreter is torn down: HDF5 closing it later, from its own
        # exit handler, would call into a Python object that is gone (a segfault, seen)
        self._closer = weakref.finalize(self, _close, self._file, self._journal)
        self._append()

    def _append(self) -> None:
        if self._file is None:
            raise ValueError(f"{self.path}: the results file is closed")
        f = self._file
        self._write_header(f)
        cases = f["cases"]
        for i in range(self._written, len(self.records)):
            _write_record(cases.create_group(f"{i:06d}"), self.records[i])
        f.flush()
        assert self._journal is not None
        self._journal.commit(len(self.records))
        self._written = len(self.records)

    def _write_header(self, f: Any) -> None:
        """The run's attributes and its environment, where they changed since last written."""
        self._set_attrs(f.attrs, "/", self.meta, lambda v: v)
        env = json.dumps
        self._set_attrs(f["environment"].attrs, "env", self.environment,
                        lambda v: env(v, default=_json_default))  # fmt: skip

    def _set_attrs(self, attrs: Any, where: str, values: dict[str, Any], encode: Any) -> None:
        # only what changed: the environment's JSON is rewritten when a machine or a
        # reference is added, not at every case
        for k, v in values.items():
            value = encode(v)
            if self._attrs.get((where, k), _UNSET) != value:
                attrs[k] = value
                self._attrs[(where, k)] = value


_UNSET = object()
#: HDF5's metadata cache, fixed at this size. Its cost per flush grows with the entries
#: it holds, and by default it grows to hold thousands, so a case's add slows as the file
#: grows. Every case is committed before the next, so what it would keep is never needed
#: again; this size kept the time per case flat (measured: benchmarks/README.md, the
#: ``store_growth.py`` paragraph).
METADATA_CACHE_BYTES = 256 * 1024


def _small_metadata_cache(f: Any) -> None:
    config = f.id.get_mdc_config()
    config.set_initial_size = True
    config.initial_size = config.max_size = METADATA_CACHE_BYTES
    config.min_size = min(config.min_size, METADATA_CACHE_BYTES)
    config.incr_mode = config.flash_incr_mode = config.decr_mode = 0  # off: a fixed size
    f.id.set_mdc_config(config)


def _close(file: Any, journal: JournaledFile) -> None:
    # HDF5 writes what it still holds as it closes: in place, that is dropped (the file
    # stays as its last commit left it); past the end, it is ignored by readers
    if journal.owner == os.getpid():
        file.close()
    journal.close()


#: HDF5's 1.8 file format: new-style groups (a B-tree of link names, so adding a case
#: touches O(log n) bytes of metadata where the 1.6 format's name heap is rewritten
#: whole) and a version-2 superblock, which carries no "open for writing" flag: a file
#: whose writer was killed opens in any HDF5 reader, as one closed normally does.
LIBVER = ("v108", "v108")
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
        return _read_settled(path)
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


def _read_settled(path: str | os.PathLike[str], tries: int = 5) -> Run:
    """:func:`_read`, tried again when the file changed while it was read: a run still
    writing it was between two writes of a commit (the next try sees it whole)."""
    for _ in range(tries - 1):
        before = _stamp(path)
        try:
            return _read(path)
        except Exception:
            if _stamp(path) == before:
                raise
        time.sleep(0.05)
    return _read(path)


def _stamp(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def _read(path: str | os.PathLike[str]) -> Run:
    import h5py

    p = Path(path)
    if not p.exists():
        raise ResultsError(f"{p}: no such file")
    try:
        image = journal_replayed(p)
        f = h5py.File(p, "r") if image is None else h5py.File(io.BytesIO(image), "r")
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


def process_medians(record: dict[str, Any], raw: str) -> list[float] | None:
    """The median of ``record[raw]``'s samples in each process that took some, in process
    order (``*_sample_process`` says which took each; a row of one process, an ensemble
    rung or a ``--quick`` case, has one); None without samples, or where several
    processes took them and the record does not say which (older files)."""
    samples = [float(x) for x in record.get(raw) or []]
    if not samples:
        return None
    takers = record.get(raw.replace("_samples", "_sample_process"))
    if takers is None or len(takers) != len(samples):
        one = int(record.get("cold_processes") or 1) == 1 or record.get("kind") == "ensemble"
        return [median(samples)] if one else None
    by: dict[int, list[float]] = {}
    for k, x in zip(takers, samples, strict=True):
        by.setdefault(int(k), []).append(x)
    return [median(by[k]) for k in sorted(by)]


def summarize(record: dict[str, Any]) -> dict[str, Any]:
    """Add medians and IQRs computed from the raw samples, and each steady kind's
    per-process medians (:func:`process_medians`)."""
    out = dict(record)
    for raw, key in SAMPLE_FIELDS.items():
        samples = record.get(raw) or []
        out[key] = median(samples)
        out[f"{key[:-2]}_iqr"] = iqr(samples)
    for raw, key in PROCESS_MEDIAN_FIELDS.items():
        medians = process_medians(record, raw)
        if medians is not None:
            out[key] = medians
    if record.get("kind") == "ensemble" and record.get("size"):
        # member-solves (and member-gradients) per second, from the median call
        for key, name in (("solve_s", "throughput"), ("grad_s", "grad_throughput")):
            out[name] = record["size"] / out[key] if out.get(key) else None
    return out

