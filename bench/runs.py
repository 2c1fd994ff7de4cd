"""Launching ``autotelic run`` arms for the benchmarks: a subprocess each, its log beside its run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def launch(name: str, overrides: list[str], runs_dir: Path, minutes: float, threads: int | None,
           recipe: Path | None = None, steps: int | None = None) -> subprocess.Popen:
    """One run named ``name`` under ``runs_dir``: ``minutes`` training minutes (time binds), or ``steps`` steps
    with ``minutes`` as a cap (the same work for every arm, however busy the machine is)."""
    command = [sys.executable, "-m", "autotelic.cli", "run", *(["--config", str(recipe)] if recipe else []),
               *overrides, f"train.steps={steps or 100000}", f"train.max_minutes={minutes}", "eval.every=0",
               "train.checkpoint_every=100000", f"model.threads={threads if threads else 'null'}",
               "logging.progress=false", f"logging.runs_dir={runs_dir}", f"logging.run_name={name}"]
    log = (runs_dir / f"{name}.log").open("w")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
