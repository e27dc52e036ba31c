"""SIGTERM and SIGHUP end a run the way Ctrl-C does.

Batch schedulers (Slurm, CI runners, ``timeout``) end jobs with SIGTERM, and a
closed terminal sends SIGHUP. Python's default for both is to die on the
spot, which left the results file marked ``running``, the worker's process
group alive and its ``/tmp/sciml-bench-*`` folder behind. Inside
:func:`stop_signals` each raises :class:`Stopped`, a ``KeyboardInterrupt``, so
every path that already handles Ctrl-C (kill the worker's group, remove its
temporary folder, mark the file ``interrupted``, keep what completed) handles
them too; :func:`exit_status` gives the shell's 128 + signal number.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

#: the signals handled like Ctrl-C (SIGINT is Python's KeyboardInterrupt already)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
#: the stop signals received inside :func:`stop_signals`. Python drops an exception raised
#: in a finaliser or ``__del__`` ("Exception ignored in ..."), so a Ctrl-C that lands while
#: the garbage collector runs one would be lost; the executor's poll raises it again
#: (:func:`raise_if_dropped`)
_received: list[int] = []


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived; ``signum`` says which."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def signal_of(exc: BaseException) -> signal.Signals:
    """The signal behind an interruption: its own for :class:`Stopped`, else SIGINT."""
    return signal.Signals(getattr(exc, "signum", signal.SIGINT))


def exit_status(sig: signal.Signals) -> int:
    """The status a shell reports for a process ended by ``sig``: 128 + its number."""
    return 128 + int(sig)


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """Raise :class:`Stopped` on SIGTERM or SIGHUP inside the block (main thread only;
    a signal already ignored, as under ``nohup``, is left ignored).

    After the first, further ones are ignored until the block exits: the cleanup
    they would interrupt is what the first one asked for.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: FrameType | None) -> None:
        _received.append(signum)
        for s in old:
            if s != signal.SIGINT:
                signal.signal(s, signal.SIG_IGN)
        raise Stopped(signum)

    def interrupt(signum: int, _frame: FrameType | None) -> None:
        _received.append(signum)
        raise KeyboardInterrupt

    # a signal ignored when we started stays ignored: `nohup sciml-bench run ...` must
    # survive the SIGHUP of a closed terminal
    wanted = [s for s in STOP_SIGNALS if signal.getsignal(s) is not signal.SIG_IGN]
    old = {s: signal.signal(s, stop) for s in wanted}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        old[signal.SIGINT] = signal.signal(signal.SIGINT, interrupt)
    _received.clear()
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        _received.clear()


def raise_if_dropped() -> None:
    """Raise again the first stop signal received inside :func:`stop_signals`, whose
    exception was dropped (its raise would otherwise have ended the caller's loop already).
    Only where no interruption is being handled: the executor's poll of a running worker."""
    if _received:
        signum = _received[0]
        raise KeyboardInterrupt if signum == signal.SIGINT else Stopped(signum)
