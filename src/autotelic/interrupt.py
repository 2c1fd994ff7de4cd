"""Ctrl-C during a run: the first finishes the step in progress (an update stopped halfway would leave weights
that are neither the last step's nor the next one's), then the run writes a checkpoint, says how to continue
and exits 130. A second Ctrl-C abandons the step at once: the run then keeps only the checkpoints it has. While
the run stops (stopping.py: its checkpoint written, its line composed), Ctrl-C is ignored: that takes seconds
and the write is atomic anyway (checkpoint.py), so a second press could only cost the checkpoint it asked for."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType, TracebackType


class Interrupted(KeyboardInterrupt):
    """The run stopped on Ctrl-C; the message says where and how to continue. The command line exits 130; a
    script that catches KeyboardInterrupt catches it too."""


class StopRequested(Exception):
    """Ctrl-C asked the run to stop at the next step boundary."""


class CtrlC:
    """Inside: the first SIGINT only sets ``requested`` (``check`` raises ``StopRequested`` where the loop may
    stop); the second raises KeyboardInterrupt where the program is. Outside the main thread (no signals
    there) it does nothing."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: signal.Handlers | None = None

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # os.write, not print: a handler that prints while the program is inside print() fails (reentrant call)
        os.write(2, b"\nCtrl-C: stopping after this step (Ctrl-C again abandons it)\n")

    def check(self) -> None:
        if self.requested:
            raise StopRequested

    @staticmethod
    @contextmanager
    def ignored() -> Iterator[None]:
        """SIGINT is ignored inside (while the run stops); main thread only, like signals."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)
