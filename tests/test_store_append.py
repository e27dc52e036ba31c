"""The results file grows by appends: what a killed writer leaves, and that a case costs
the same to write at the end of a long run as at its start (issue 34)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from sciml_bench.results import store

ROOT = Path(__file__).resolve().parent.parent

#: a child that writes cases one by one, saying so after each add() returns; with a third
#: argument ("step") it waits for a line on stdin before each case after the first, so
#: that the test decides when the next append starts
CHILD = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    from sciml_bench.results import store
    w = store.ResultsWriter(sys.argv[1], {"python": "3"}, "test")
    step = len(sys.argv) > 3
    for i in range(int(sys.argv[2])):
        if step and i:
            sys.stdin.readline()
        w.add({"kind": "ode", "backend": f"b{i}", "status": "ok", "steps": i,
               "solve_samples": np.linspace(0, 1, 50 + i), "gradient": {"k": float(i)}})
        print("added", i + 1, flush=True)
    time.sleep(60)
    """
)


def _record(i: int, n: int = 40) -> dict[str, Any]:
    return {
        "kind": "ode", "problem": "p", "backend": f"b{i}", "status": "ok", "reason": "",
        "rtol": 1e-6, "steps": i, "solve_samples": list(np.linspace(0.1, 0.2, n)),
        "phases": np.ones((1, 4)), "gradient": {"k1": 1.5, "k2": -float(i)}, "options": {},
    }  # fmt: skip


def _child(path: Path, cases: int, kill_at: str = "", step: bool = False) -> subprocess.Popen[str]:
    env = {**os.environ, "SCIML_BENCH_TEST_STORE_KILL": kill_at}
    args = [sys.executable, "-c", CHILD, str(path), str(cases), *(["step"] if step else [])]
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True,
                            stdin=subprocess.PIPE if step else None)  # fmt: skip


def _next_line(proc: subprocess.Popen[str], timeout: float = 60.0) -> str:
    """The child's next line of output, waiting at most ``timeout`` seconds for it (the
    child prints one line and then waits for stdin: nothing sits in the pipe's buffer)."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"no line from the child in {timeout:g} s"
    return proc.stdout.readline().strip()


def test_killed_between_two_appends_keeps_exactly_the_completed_cases(tmp_path: Path) -> None:
    """The kill lands while the child waits between its third and fourth appends: it
    cannot start the fourth until told to, and is never told (before, the kill raced the
    fourth append, which could finish first)."""
    path = tmp_path / "run.h5"
    proc = _child(path, 50, step=True)
    try:
        assert proc.stdin is not None
        for i in (1, 2, 3):
            assert _next_line(proc) == f"added {i}"
            if i < 3:
                proc.stdin.write("next\n")
                proc.stdin.flush()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    run = store.read(path)
    assert run.meta["status"] == "running"
    assert [r["backend"] for r in run.records] == ["b0", "b1", "b2"]
    assert run.records[2]["gradient"] == {"k": 2.0} and len(run.records[2]["solve_samples"]) == 52
    with h5py.File(path, "r") as f:  # and any HDF5 reader opens it, as a closed file
        assert sorted(f["cases"]) == ["000000", "000001", "000002"]


@pytest.mark.parametrize(
    ("step", "kept"),
    [
        ("new", 3),  # the new case's objects written, nothing in place yet
        ("journal", 4),  # the journal whole, nothing in place yet: it is replayed
        ("inplace", 4),  # half the in-place writes done: the journal completes them
    ],
)
def test_killed_during_an_append_keeps_every_earlier_case(
    tmp_path: Path, step: str, kept: int
) -> None:
    path = tmp_path / "run.h5"
    proc = _child(path, 6, kill_at=f"4:{step}")  # SIGKILLs itself inside the 4th add
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, out
    assert out.split("\n")[:-1] == [f"added {i}" for i in (1, 2, 3)]
    run = store.read(path)
    assert run.meta["status"] == "running"
    assert [r["backend"] for r in run.records] == [f"b{i}" for i in range(kept)]
    assert run.records[-1]["solve_samples"] == list(np.linspace(0, 1, 50 + kept - 1))


def _recorded_writes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, Any, int]]:
    """Every write and truncate to a file descriptor, in order, as (what, fd, data, offset)."""
    ops: list[tuple[str, int, Any, int]] = []
    pwrite, ftruncate = os.pwrite, os.ftruncate

    def rec_pwrite(fd: int, data: bytes, offset: int) -> int:
        ops.append(("w", fd, bytes(data), offset))
        return pwrite(fd, data, offset)

    def rec_ftruncate(fd: int, size: int) -> None:
        ops.append(("t", fd, None, size))
        ftruncate(fd, size)

    monkeypatch.setattr(os, "pwrite", rec_pwrite)
    monkeypatch.setattr(os, "ftruncate", rec_ftruncate)
    return ops


def test_a_kill_at_any_write_leaves_every_completed_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file as a kill after each of the writer's writes (and inside each write larger
    than a page, at every 4 KiB) would leave it: it reads, with every case whose add()
    had returned."""
    path = tmp_path / "run.h5"
    w = store.ResultsWriter(path, {"python": "3"}, "test")
    start = path.read_bytes()
    assert w._journal is not None
    fd = w._journal.fd
    ops = _recorded_writes(monkeypatch)
    done: list[int] = []  # cases complete before each op
    for i in range(8):
        if i == 5:
            w.environment["machines"] = {"h": {"cpu": "x" * 3000}}  # rewritten in place
        n0 = len(ops)
        w.add({**_record(i), "y": np.random.default_rng(i).random((400, 3))})
        done += [i] * (len(ops) - n0)
    n0 = len(ops)
    w.finish("complete")
    done += [8] * (len(ops) - n0)
    monkeypatch.undo()

    image = bytearray(start)
    probe = tmp_path / "probe.h5"
    checked = 0

    def check(img: bytearray, complete: int) -> None:
        nonlocal checked
        probe.write_bytes(img)
        assert len(store.read(probe).records) >= complete
        checked += 1

    for (what, ofd, data, offset), complete in zip(ops, done, strict=True):
        if ofd != fd:
            continue
        if what == "t":
            del image[offset:]
            image.extend(bytes(offset - len(image)))
        else:
            for cut in range(4096, len(data), 4096):  # a kill inside a large write
                torn = bytearray(image)
                torn.extend(bytes(max(0, offset + cut - len(torn))))
                torn[offset : offset + cut] = data[:cut]
                check(torn, complete)
            image.extend(bytes(max(0, offset + len(data) - len(image))))
            image[offset : offset + len(data)] = data
        check(image, complete)
    assert checked > 50
    assert store.read(probe).meta["status"] == "complete"
    assert len(store.read(probe).records) == 8


def _written_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError("no wchar in /proc/self/io")


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux's /proc/self/io")
def test_a_case_is_appended_not_the_file_rewritten(tmp_path: Path) -> None:
    """The same inode throughout, and the 300th case costs about the bytes the 5th did
    (a store that rewrites the file writes 60 times as much by then)."""
    path = tmp_path / "run.h5"
    w = store.ResultsWriter(path, {"python": "3"}, "test")
    inode = path.stat().st_ino
    cost: dict[int, int] = {}
    for i in range(300):
        before = _written_bytes()
        w.add(_record(i))
        cost[i] = _written_bytes() - before
    assert path.stat().st_ino == inode
    early, late = (
        np.median([cost[i] for i in range(5, 15)]),
        np.median([cost[i] for i in range(290, 300)]),
    )
    assert late < 3 * early, (early, late)
    w.finish("complete")
    assert path.stat().st_ino == inode
    assert len(store.read(path).records) == 300


def test_read_while_the_writer_has_it_open(tmp_path: Path) -> None:
    path = tmp_path / "run.h5"
    w = store.ResultsWriter(path, {"python": "3"}, "test")
    for i in range(3):
        w.add(_record(i))
        run = store.read(path)
        assert run.meta["status"] == "running" and len(run.records) == i + 1
    with h5py.File(path, "r") as f:  # no lock held: a plain HDF5 reader opens it too
        assert len(f["cases"]) == 3
    w.environment["references"] = {"p": {"source": "cache"}}
    w.flush()
    assert store.read(path).environment["references"] == {"p": {"source": "cache"}}
    w.finish("interrupted", interrupted_by="SIGTERM")
    w.add(_record(3))  # a record after finish() is still written (the writer stays open)
    run = store.read(path)
    assert run.meta["interrupted_by"] == "SIGTERM" and len(run.records) == 4
    w.close()
    assert len(store.read(path).records) == 4


def test_the_file_renamed_into_place_already_has_its_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader polling a run's folder (tests/test_faults.py's interrupt tests) can open the
    file between its rename into place and the writer's first commit: it is a results file
    then, with its header and no case, never "not a sciml-bench results file"."""
    monkeypatch.setattr(store.ResultsWriter, "_append", lambda self: None)  # stop there
    store.ResultsWriter(tmp_path / "run.h5", {"python": "3.11"}, "sciml-bench run x")
    run = store.read(tmp_path / "run.h5")
    assert (run.meta["format"], run.meta["status"], run.meta["command"]) == (
        store.FORMAT, "running", "sciml-bench run x")
    assert run.environment == {"python": "3.11"} and run.records == []
