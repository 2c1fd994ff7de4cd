"""One JSON per bench run under bench/results/: what ran, on which code, on which machine, and what came out.

Every figure quoted in docs/results.md and bench/RESULTS.md should point at one of these files. The machine
is read from the machine itself while the bench runs (CPU model and flags, the cores this process may use,
memory, torch and its threads, the libraries' versions), not from what the docs say it is.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, TypedDict

from stats import Comparison  # bench/stats.py: the importing script's directory is on sys.path

RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parent.parent
# Summary keys listing the runs whose budget did not bind as planned: a time cap that stopped an arm, or (at equal
# minutes) a step ceiling reached before the time budget. Readers of an artifact look them up by these names.
TIME_CAP_BOUND = "time_cap_bound"
STEP_CEILING_BOUND = "step_ceiling_bound"
BUDGET_FLAGS = (TIME_CAP_BOUND, STEP_CEILING_BOUND)


class Revision(TypedDict):
    commit: str
    dirty: bool  # tracked files differ from the commit: the numbers may not reproduce from it alone


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


def revision() -> Revision:
    return Revision(commit=_git("rev-parse", "HEAD"), dirty=bool(_git("status", "--porcelain", "--untracked-files=no")))


def code_trees() -> dict[str, str] | None:
    """The git trees of what a training run executes (src/ and recipes/ at HEAD), or None while either has
    uncommitted changes: two runs with the same trees ran the same code, whatever else the commits changed."""
    if _git("status", "--porcelain", "--", "src", "recipes"):
        return None
    return {path: _git("rev-parse", f"HEAD:{path}") for path in ("src", "recipes")}


def _cpuinfo() -> dict[str, str]:
    """The first processor's block of /proc/cpuinfo (the others repeat it)."""
    fields: dict[str, str] = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def _mem_total_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 2**20, 1)
    raise RuntimeError("/proc/meminfo has no MemTotal")


PACKAGES = ("autotelic", "torch", "transformers", "peft", "trl", "datasets", "ray", "vllm")


def _versions() -> dict[str, str | None]:
    """The installed versions of the libraries a bench may run on (None: not installed)."""
    found: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def machine() -> dict[str, Any]:
    cpu = _cpuinfo()
    torch = sys.modules.get("torch")  # described when the bench uses it; importing it here would cost seconds
    return {
        "cpu_model": cpu.get("model name", platform.processor()),
        "cpu_flags": cpu.get("flags", "").split(),
        "logical_cpus": os.cpu_count(),
        "affinity_cpus": len(os.sched_getaffinity(0)),  # what this process may run on, under taskset or a cgroup
        "mem_total_gib": _mem_total_gib(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": _versions(),
        **({"torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None} if torch else {}),
    }


def run_name(arm: str, seed: int) -> str:
    """A bench run's directory name in its runs dir, which archives and the artifacts' rows are read back by."""
    return f"{arm}-s{seed}"


def arm_and_seed(name: str) -> tuple[str, int]:
    """``run_name``'s arm and seed (an arm's name may hold ``-s``, never at its end followed by digits only)."""
    arm, _, seed = name.rpartition("-s")
    if not arm or not seed.isdigit():
        raise ValueError(f"{name!r} is not a bench run's name (<arm>-s<seed>)")
    return arm, int(seed)


def script_from_root(script: str) -> str:
    """A bench script as named from the checkout's root, from whatever directory it was started."""
    path = Path(script).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else script


def write(bench: str, rows: list[dict[str, Any]], comparisons: list[Comparison],
          summary: dict[str, Any] | None = None, directory: Path = RESULTS) -> Path:
    """Write ``<directory>/<bench>-<UTC timestamp>.json``; ``rows``: one per arm and seed, each naming both."""
    missing = [row for row in rows if not {"arm", "seed"} <= row.keys()]
    if missing:
        raise ValueError(f"every row names its arm and seed: {missing[0]}")
    now = datetime.now(timezone.utc)
    record = {
        "bench": bench,
        "command": shlex.join(["python", script_from_root(sys.argv[0]), *sys.argv[1:]]),
        "written_utc": now.isoformat(timespec="seconds"),
        "revision": revision(),
        "machine": machine(),
        "rows": rows,
        "comparisons": comparisons,
        "summary": summary or {},
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{bench}-{now.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path
