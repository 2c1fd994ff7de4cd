"""Checkpoints: everything needed to continue a run exactly where it stopped.

A checkpoint is written to ``step_N.partial`` and renamed when complete, so a kill during a
save never damages the previous checkpoint; only the newest ``keep`` are kept.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

PREFIX = "step_"


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    done = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(PREFIX) and p.name[len(PREFIX):].isdigit()]
    return sorted(done, key=lambda p: int(p.name[len(PREFIX):]))


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = checkpoint_dirs(run_dir)
    return found[-1] if found else None


def save_checkpoint(run_dir: Path, step: int, payload: dict[str, Any], keep: int) -> Path:
    root = run_dir / "checkpoints"
    final = root / f"{PREFIX}{step:06d}"
    staging = root / f"{final.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    torch.save(payload, staging / "state.pt")
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    for old in checkpoint_dirs(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(path: Path) -> dict[str, Any]:
    try:
        return torch.load(path / "state.pt", weights_only=False)
    except Exception as error:  # a truncated or foreign file
        raise RuntimeError(f"checkpoint {path} cannot be read: {error}".splitlines()[0]) from error
