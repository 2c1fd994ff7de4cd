"""One program's run: the launch command for an isolation, the trusted bootstrap, supervision and the result.

The bootstrap (`_BOOTSTRAP`, run as `python -I -S -c`) is the first program inside the isolation. It forks
the program and stays behind as its init; the program sets the rlimits (CPU, address space, data, file
size, core, processes), gives up root for nobody (65534) in a user namespace of its own, so RLIMIT_NPROC
binds and counts this sandbox's processes only, sets no_new_privs so no setuid program gives root back,
then execs `python -E -s main.py`. Why not `-I`: it implies -P, which keeps the script's directory off
sys.path, and a test module passed in `files` must import the solution beside it. The environment is
PATH, LANG, HOME and TMPDIR only. The launcher kills the whole tree at the wall-time limit or when a
stream passes its cap (output is read in chunks and never buffered past the cap).
"""

from __future__ import annotations

import logging
import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

log = logging.getLogger("autotelic.sandbox")

NOBODY = 65534
WORKDIR = "/tmp/work"  # the working directory inside bwrap
MAIN = "main.py"
_GRACE = 0.2  # seconds to drain the pipes after the program exited while something still holds them


@dataclass(frozen=True)
class SandboxLimits:
    cpu_seconds: float = 5.0
    wall_seconds: float = 10.0
    memory_mb: int = 512
    max_processes: int = 32
    output_bytes: int = 65_536  # per stream; the rest is cut and status becomes "output_limit"
    file_bytes: int = 16 * 2**20  # largest file the program may write


@dataclass
class ExecutionResult:
    status: str  # "ok" | "error" | "timeout" | "memory" | "output_limit" | "killed"
    returncode: int | None  # negative: killed by that signal; None: never started
    stdout: str
    stderr: str
    seconds: float  # wall time, launch to exit

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# argv: cpu_seconds memory_bytes max_processes file_bytes uid  python -E -s main.py   (uid -1: keep ours)
_BOOTSTRAP = r"""
import os, resource as r, sys
cpu, mem, nproc, fsize, uid = map(int, sys.argv[1:6])
# This process stays behind as a small init (pid 1 of the namespace in unshare mode): it reaps, and exits
# with the program's status, a death by signal n as 128+n (as bwrap does). It alone sees the program's
# CPU time, so it reports a SIGKILL at the CPU hard limit (SIGXCPU was ignored) as SIGXCPU.
child = os.fork()
while child:
    pid, status, usage = os.wait4(-1, 0)
    if pid == child:
        code = os.waitstatus_to_exitcode(status)
        if code == -9 and usage.ru_utime + usage.ru_stime >= cpu:
            code = -24
        os._exit(code if code >= 0 else 128 - code)
for res, soft, hard in ((r.RLIMIT_CPU, cpu, cpu + 1), (r.RLIMIT_AS, mem, mem), (r.RLIMIT_DATA, mem, mem),
                        (r.RLIMIT_FSIZE, fsize, fsize), (r.RLIMIT_CORE, 0, 0)):
    r.setrlimit(res, (soft, hard))
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
if uid >= 0:  # root: become nobody, the only way RLIMIT_NPROC binds and the system's files stay closed
    os.setgroups([]); os.setresgid(uid, uid, uid); os.setresuid(uid, uid, uid)
    libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: the uid change made /proc/self root's
    if libc.unshare(0x10000000) == 0:  # CLONE_NEWUSER: RLIMIT_NPROC now counts this sandbox only
        for name, line in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{uid} {uid} 1")):
            with open("/proc/self/" + name, "w") as f:
                f.write(line)
libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: su, sudo and other setuid programs stay powerless
r.setrlimit(r.RLIMIT_NPROC, (nproc, nproc))
os.execv(sys.argv[6], sys.argv[6:])
"""


@dataclass(frozen=True)
class Isolation:
    """How programs are launched: the mode ("bwrap" | "unshare" | "unsafe_rlimits") and what it needs."""

    mode: str
    python: str
    uid: int  # the uid the bootstrap drops to, -1 to keep ours
    tool: str | None = None  # the bwrap or unshare executable
    mounts: tuple[str, ...] = ()  # bwrap arguments: the read-only system dirs, before the private /tmp
    binds: tuple[str, ...] = ()  # bwrap arguments: the interpreter's dirs, after it (a venv in /tmp stays visible)


# ---------------------------------------------------------------------------------------------
# One execution


def execute(iso: Isolation, limits: SandboxLimits, files: dict[str, str], stdin: str,
             start: float) -> ExecutionResult:
    host_dir, fds, file_args = None, [], []
    try:
        if iso.mode == "bwrap":  # the work dir is /tmp/work on the sandbox's own tmpfs
            cwd, workdir = "/", WORKDIR
            fds, file_args = _memfds(files, iso.uid if iso.uid >= 0 else os.getuid())
        else:  # a fresh host directory, the program's own
            host_dir = cwd = workdir = tempfile.mkdtemp(prefix="autotelic-sandbox-")
            _write_tree(host_dir, files, iso.uid)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir, "TMPDIR": workdir}
        cmd = _command(iso, limits, env, file_args, f"{workdir}/{MAIN}",
                       # bwrap's tmpfs for /tmp: the inputs plus room for a few of the largest files
                       scratch=4 * limits.file_bytes + sum(len(text.encode()) for text in files.values()))
        with tempfile.TemporaryFile() as stdin_file:  # a file, not a pipe: no writer to block
            stdin_file.write(stdin.encode())
            stdin_file.seek(0)
            proc = subprocess.Popen(cmd, stdin=stdin_file, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env=env, cwd=cwd, pass_fds=fds, start_new_session=True)
        for fd in fds:
            os.close(fd)
        fds = []
        return _supervise(proc, limits, start)
    finally:
        for fd in fds:
            os.close(fd)
        if host_dir is not None:
            _remove(host_dir)


def _command(iso: Isolation, limits: SandboxLimits, env: dict[str, str], file_args: list[str], main: str,
             scratch: int) -> list[str]:
    boot = [iso.python, "-I", "-S", "-c", _BOOTSTRAP, str(math.ceil(limits.cpu_seconds)),
            str(limits.memory_mb * 2**20), str(limits.max_processes), str(limits.file_bytes), str(iso.uid),
            iso.python, "-E", "-s", main]
    if iso.mode == "unsafe_rlimits":
        return boot
    if iso.mode == "unshare":
        user = [] if os.geteuid() == 0 else ["--map-current-user"]
        return [iso.tool, *user, "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child",
                "--mount-proc", *boot]
    cmd = [iso.tool, "--die-with-parent", "--new-session", "--clearenv", "--unshare-net", "--unshare-pid",
           "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
    if os.geteuid() != 0:  # as root the bootstrap makes its own user namespace after dropping to nobody
        cmd.append("--unshare-user")
    cmd += [*iso.mounts, "--proc", "/proc", "--dev", "/dev",
            "--perms", "1777", "--size", str(scratch), "--tmpfs", "/tmp",
            "--perms", "1777", "--size", str(limits.file_bytes), "--tmpfs", "/dev/shm", *iso.binds,
            # the root and /dev tmpfs that bwrap built are read-only to the program: /tmp is its one writable place
            *file_args, "--remount-ro", "/", "--remount-ro", "/dev", "--chdir", WORKDIR]
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    return cmd + boot


def _memfds(files: dict[str, str], uid: int) -> tuple[list[int], list[str]]:
    """The program's files as memfds that bwrap copies into the sandbox's tmpfs (nothing touches host
    disk), and an /etc/passwd and /etc/group naming the program's uid (getpass.getuser() needs one)."""
    user = f"sandbox:x:{uid}:{uid}:sandbox:{WORKDIR}:/usr/sbin/nologin\n"
    entries = [(f"{WORKDIR}/{name}", text, "--file", "0666") for name, text in files.items()]
    entries += [("/etc/passwd", user, "--file", "0644"), ("/etc/group", f"sandbox:x:{uid}:\n", "--file", "0644")]  # / is read-only
    fds, args, dirs = [], ["--perms", "0777", "--dir", WORKDIR], set()
    try:
        for dest, text, how, perms in entries:
            for parent in map(str, reversed(PurePosixPath(dest).parents[:-1])):
                if parent.startswith(WORKDIR + "/") and parent not in dirs:  # a package among the files
                    dirs.add(parent)
                    args += ["--perms", "0777", "--dir", parent]
            fd = os.memfd_create(os.path.basename(dest))
            fds.append(fd)
            data = memoryview(text.encode())
            while data:
                data = data[os.write(fd, data):]
            os.lseek(fd, 0, os.SEEK_SET)
            args += ["--perms", perms, how, str(fd), dest]
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds, args


def _write_tree(root: str, files: dict[str, str], uid: int) -> None:
    for name, text in files.items():
        path = Path(root, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if uid >= 0:  # the program runs as nobody: the directory must be its own
        for dirpath, dirnames, filenames in os.walk(root):
            for entry in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
                os.chown(entry, uid, uid)


def _remove(path: str) -> None:
    """Deletes the work dir even after the program chmod-ed parts of it unreadable."""

    def unlock(func, failed, _exc):
        for p in (os.path.dirname(failed), failed):
            try:
                os.chmod(p, 0o700)
            except OSError:
                pass
        try:
            shutil.rmtree(failed) if os.path.isdir(failed) and not os.path.islink(failed) else func(failed)
        except OSError:
            pass

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=unlock)
    else:
        shutil.rmtree(path, onerror=unlock)
    if os.path.exists(path):
        log.warning("sandbox: could not remove %s", path)


def _supervise(proc: subprocess.Popen, limits: SandboxLimits, start: float) -> ExecutionResult:
    try:
        out, err, overflow, timed_out = _collect(proc, limits.output_bytes, start + limits.wall_seconds)
        if overflow or timed_out:  # killed before its pipes close: a program still writing would die of EPIPE first
            _kill(proc.pid)
    except BaseException:  # e.g. KeyboardInterrupt in the caller: take the program down with us
        _kill(proc.pid)
        proc.wait()
        raise
    finally:
        proc.stdout.close()
        proc.stderr.close()
    if not (overflow or timed_out):  # leftovers of the program's process group (unsafe_rlimits mode; the
        _killpg(proc.pid)  # namespace modes kill them anyway)
    code = proc.wait()
    if code > 128:  # the bootstrap's init (and bwrap) report a death by signal n as 128+n
        code = 128 - code
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    return ExecutionResult(_status(code, overflow, timed_out, stderr), code, stdout, stderr, time.monotonic() - start)


def _collect(proc: subprocess.Popen, cap: int, deadline: float) -> tuple[bytes, bytes, bool, bool]:
    """Reads both pipes until the program ends, its deadline passes or a stream passes `cap` bytes."""
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    bufs = {out_fd: bytearray(), err_fd: bytearray()}
    sel = selectors.DefaultSelector()
    for fd in bufs:
        sel.register(fd, selectors.EVENT_READ)
    try:
        pidfd = os.pidfd_open(proc.pid)  # readable once the process has exited (Linux 5.3+)
        sel.register(pidfd, selectors.EVENT_READ)
    except (AttributeError, OSError):
        pidfd = None
    open_fds, exited_at, overflow, timed_out = set(bufs), None, False, False
    try:
        while True:
            now = time.monotonic()
            if exited_at is None and pidfd is None and os.waitid(os.P_PID, proc.pid,
                                                                 os.WEXITED | os.WNOHANG | os.WNOWAIT):
                exited_at = now
            if exited_at is not None and (not open_fds or now > exited_at + _GRACE):
                break
            if now >= deadline:
                timed_out = True
                break
            timeout = deadline - now
            if exited_at is not None:
                timeout = min(timeout, exited_at + _GRACE - now)
            elif pidfd is None:
                timeout = min(timeout, 0.05)
            for key, _ in sel.select(timeout):
                fd = key.fd
                if fd == pidfd:
                    exited_at = time.monotonic()
                    sel.unregister(fd)
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    sel.unregister(fd)
                    open_fds.discard(fd)
                    continue
                buf = bufs[fd]
                buf += chunk[: cap + 1 - len(buf)]
                if len(buf) > cap:
                    del buf[cap:]
                    overflow = True
            if overflow:
                break
    finally:
        sel.close()
        if pidfd is not None:
            os.close(pidfd)
    return bytes(bufs[out_fd]), bytes(bufs[err_fd]), overflow, timed_out


def _status(code: int, overflow: bool, timed_out: bool, stderr: str) -> str:
    if overflow:
        return "output_limit"
    if timed_out:
        return "timeout"
    if code == 0:
        return "ok"
    if code == -signal.SIGXCPU:  # the CPU limit (the bootstrap reports its hard-limit SIGKILL as SIGXCPU too)
        return "timeout"
    tail = stderr[-2000:]
    if "MemoryError" in tail or "Cannot allocate memory" in tail or "out of memory" in tail:
        return "memory"
    return "killed" if code < 0 else "error"


def _kill(pid: int) -> None:
    """SIGKILLs our child, everything below it and its process group. In bwrap and unshare mode one
    of the descendants is pid 1 of the program's pid namespace, whose death kills the whole namespace."""
    for _ in range(3):
        victims = _descendants(pid)
        for victim in [pid, *victims]:
            try:
                os.kill(victim, signal.SIGKILL)
            except OSError:
                pass
        _killpg(pid)
        if not victims:
            return


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])  # after "(comm)": state ppid ...
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


