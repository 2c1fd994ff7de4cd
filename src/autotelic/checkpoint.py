"""Checkpoints: everything needed to continue a run exactly where it stopped.

A checkpoint is written to ``step_N.partial`` and renamed when complete, so a kill during a
save never damages the previous checkpoint; only the newest ``keep`` are kept. Writing runs on a
background thread (a full-model checkpoint of the 135M model is 1.6 GB, ~4 s of disk time), so
it overlaps the next step's generation.
"""

from __future__ import annotations

import shutil
import threading
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


class CheckpointWriter:
    """One checkpoint write in flight at a time, on a background thread.

    The payload's tensors are not copied: the trainer must call ``wait()`` before anything
    mutates them (the next optimizer step), which keeps every checkpoint consistent.
    """

    def __init__(self, run_dir: Path, keep: int):
        self.run_dir, self.keep = run_dir, keep
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def save(self, step: int, payload: dict[str, Any]) -> None:
        self.wait()
        self._thread = threading.Thread(target=self._write, args=(step, payload), name=f"checkpoint-{step}")
        self._thread.start()

    def _write(self, step: int, payload: dict[str, Any]) -> None:
        try:
            save_checkpoint(self.run_dir, step, payload, self.keep)
        except BaseException as error:  # re-raised on the training thread by wait()
            self._error = error

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(f"writing a checkpoint failed: {error}") from error
