"""A file that HDF5 writes through, whose commits survive a kill: the results file's
journal (see :class:`JournaledFile`; :mod:`sciml_bench.results.store` uses it).

A commit appends the in-place writes as a journal at the file's end,

    [offset u64, length u64, bytes] ... [magic, body length, size after the commit, digest],

applies them, and truncates the journal away; :func:`journal_replayed` completes a commit
that a kill cut after its journal was whole.
"""

from __future__ import annotations

import hashlib
import os
import signal
import struct
from pathlib import Path

#: the end of a file whose commit was cut after its journal was written
JOURNAL_MAGIC = b"SBJRNL01"
_TRAILER = struct.Struct("<8sQQ16s")  # magic, body length, size after the commit, digest
_ENTRY = struct.Struct("<QQ")  # offset, length (then the bytes)


def _digest(body: bytes, size: int) -> bytes:
    return hashlib.blake2b(body + size.to_bytes(8, "little"), digest_size=16).digest()


class JournaledFile:
    """The file object HDF5 writes the open results file through (h5py's ``fileobj``
    driver), which makes each commit atomic with respect to a kill.

    HDF5 updates its metadata (the superblock, the ``cases`` group's index, changed
    attributes) in place, in an order of its own choosing, and a process killed between
    two of those writes leaves a file that no longer opens (measured: most kill points
    inside an append, with or without SWMR). So writes are split at the size the file
    had at the last commit: bytes past it (new objects) go to disk at once, where no
    reader looks yet; bytes below it are held in memory. :meth:`commit` then appends the
    held writes as a journal with a digest at the file's end, applies them in place, and
    truncates the journal away. A kill before the journal is whole leaves the previous
    commit intact (the tail is ignored); a kill after it leaves a journal that
    :func:`journal_replayed` applies when reading; a kill at the truncate leaves one or
    the other.
    """

    def __init__(self, path: Path):
        self.fd = os.open(path, os.O_RDWR)
        self.owner = os.getpid()  # a forked child that closes its copy must not write
        self.committed = os.fstat(self.fd).st_size  # bytes a reader may be reading
        self.eof = self.committed  # the size HDF5 sees
        self.pos = 0
        self.held: list[tuple[int, bytes]] = []
        #: bytes written per commit, for the benchmark: (in place, journal, new)
        self.last_bytes = (0, 0, 0)
        self._new_bytes = 0
        self.fsync = os.environ.get("SCIML_BENCH_STORE_FSYNC", "1") != "0"
        self._kill_at = os.environ.get("SCIML_BENCH_TEST_STORE_KILL", "")  # test-only

    # the file-object protocol h5py's fileobj driver calls
    def seek(self, offset: int, whence: int = 0) -> int:
        start = 0 if whence == 0 else self.eof if whence == 2 else self.pos
        self.pos = start + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, size: int) -> bytes:
        data = bytearray(os.pread(self.fd, size, self.pos))
        data.extend(bytes(size - len(data)))  # past the end reads as zeros, as sec2 does
        for off, held in self.held:  # a held write HDF5 reads back
            lo, hi = max(off, self.pos), min(off + len(held), self.pos + size)
            if lo < hi:
                data[lo - self.pos : hi - self.pos] = held[lo - off : hi - off]
        self.pos += size
        return bytes(data)

    def write(self, data: bytes) -> int:
        off, n = self.pos, len(data)
        if os.getpid() != self.owner:
            return n
        cut = min(max(self.committed - off, 0), n)
        if cut:
            self.held.append((off, bytes(data[:cut])))
        if cut < n:
            _pwrite_all(self.fd, data[cut:], off + cut)
            self._new_bytes += n - cut
        self.pos += n
        self.eof = max(self.eof, self.pos)
        return n

    def truncate(self, size: int) -> int:
        self.eof = size  # applied at the commit
        return size

    def flush(self) -> None:
        pass  # HDF5's flush hands over its writes; they reach the disk at commit()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def commit(self, label: int = 0) -> None:
        """Make what HDF5 wrote since the last commit the file's content, atomically."""
        self._test_kill(label, "new")
        size = self.eof
        journal = 0
        if self.held:
            body = b"".join(_ENTRY.pack(off, len(d)) + d for off, d in self.held)
            tail = _TRAILER.pack(JOURNAL_MAGIC, len(body), size, _digest(body, size))
            at = max(os.fstat(self.fd).st_size, size)
            _pwrite_all(self.fd, body + tail, at)
            journal = len(body) + len(tail)
            if self.fsync:
                os.fsync(self.fd)  # the journal is on disk before anything it covers changes
            self._test_kill(label, "journal")
            for i, (off, d) in enumerate(self.held):
                _pwrite_all(self.fd, d, off)
                if i == 0:
                    self._test_kill(label, "inplace")
        os.ftruncate(self.fd, size)
        if self.fsync:
            os.fsync(self.fd)
        self.last_bytes = (sum(len(d) for _, d in self.held), journal, self._new_bytes)
        self.held, self.committed, self._new_bytes = [], size, 0

    def _test_kill(self, label: int, step: str) -> None:
        # SCIML_BENCH_TEST_STORE_KILL=N:step kills the writer at that step of the commit
        # that writes its Nth record (tests/test_store_append.py): a real kill, mid-append
        if self._kill_at == f"{label}:{step}":
            os.kill(os.getpid(), signal.SIGKILL)


def _pwrite_all(fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:  # a write to a regular file may be short (over 2 GiB at once, on Linux)
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def journal_replayed(path: Path) -> bytes | None:
    """The file as its last commit left it, when a kill cut that commit after its
    journal was written; None when the file ends with no journal (the usual case)."""
    with open(path, "rb") as fh:
        end = fh.seek(0, 2)
        if end < _TRAILER.size:
            return None
        fh.seek(end - _TRAILER.size)
        magic, n, size, digest = _TRAILER.unpack(fh.read(_TRAILER.size))
        if magic != JOURNAL_MAGIC or n > end - _TRAILER.size:
            return None
        fh.seek(end - _TRAILER.size - n)
        body = fh.read(n)
        if _digest(body, size) != digest:
            return None  # a journal cut short: the file below it is the previous commit
        fh.seek(0)
        image = bytearray(fh.read(size))
    image.extend(bytes(size - len(image)))
    i = 0
    while i < n:
        off, length = _ENTRY.unpack_from(body, i)
        i += _ENTRY.size
        image[off : off + length] = body[i : i + length]
        i += length
    return bytes(image)
