"""Checkpoints: everything needed to continue a run exactly where it stopped.

A checkpoint is written to ``step_N.partial``: state.pt, then manifest.json with its size and sha256; both are
fsync'd, the directory is renamed to ``step_N`` and the rename fsync'd, so a kill or power loss at any moment
leaves the older checkpoints whole and the new one either whole or absent. Loading checks state.pt against its
manifest: a damaged newest checkpoint (a disk fault, a copy cut short) is named in a warning and the one before
it is used. Only the newest ``keep`` are kept, so keep >= 2 always leaves one to fall back to. Writing runs on a
background thread (a full-model checkpoint of the 135M model is 1.6 GB, ~4 s of disk time), so it overlaps the
next step's generation.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)

PREFIX = "step_"
STATE, MANIFEST = "state.pt", "manifest.json"


class CheckpointError(RuntimeError):
    """No usable checkpoint: the message names the run directory or checkpoint and what to do."""


def checkpoint_step(checkpoint: Path) -> int:
    return int(checkpoint.name[len(PREFIX):])


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    done = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(PREFIX) and p.name[len(PREFIX):].isdigit()]
    return sorted(done, key=checkpoint_step)


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = checkpoint_dirs(run_dir)
    return found[-1] if found else None


def _fsync(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)  # a directory too: that makes its entries (renames) durable
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def publish_dir(staging: Path, final: Path) -> None:
    """Make the complete directory ``staging`` appear as ``final`` (replacing an older one) in one rename,
    durably: its files reach the disk before the name does, so ``final`` is never seen half-written."""
    for path in staging.rglob("*"):
        _fsync(path)
    _fsync(staging)
    if final.exists():  # a directory cannot be renamed over a non-empty one: move the old aside first
        old = final.with_name(final.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
        staging.rename(final)
        shutil.rmtree(old)
    else:
        staging.rename(final)
    _fsync(final.parent)


def _sha256(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def save_checkpoint(run_dir: Path, step: int, payload: dict[str, Any], keep: int) -> Path:
    root = run_dir / "checkpoints"
    final = root / f"{PREFIX}{step:06d}"
    staging = final.with_name(final.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        torch.save(payload, staging / STATE)
        manifest = {"file": STATE, "bytes": (staging / STATE).stat().st_size, "sha256": _sha256(staging / STATE)}
        (staging / MANIFEST).write_text(json.dumps(manifest))
        publish_dir(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # a write cut short (a full disk) leaves no half checkpoint
        raise
    kept = checkpoint_dirs(run_dir)[-keep:] if keep > 0 else checkpoint_dirs(run_dir)
    for path in root.iterdir():  # older checkpoints, and staging left by a write that was killed
        if path not in kept:
            shutil.rmtree(path, ignore_errors=True)
    return final


def damage(checkpoint: Path) -> str | None:
    """Why ``checkpoint`` cannot be trusted, or None when its state.pt matches its manifest."""
    try:
        manifest = json.loads((checkpoint / MANIFEST).read_text())
        size, digest = int(manifest["bytes"]), str(manifest["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return f"{MANIFEST} is missing or unreadable"
    state = checkpoint / STATE
    if not state.is_file():
        return f"{STATE} is missing"
    if state.stat().st_size != size:
        return f"{STATE} holds {state.stat().st_size} bytes, its manifest says {size}"
    if _sha256(state) != digest:
        return f"{STATE} does not match its sha256 checksum"
    return None


def load_checkpoint(path: Path) -> dict[str, Any]:
    problem = damage(path)
    if problem is not None:
        raise CheckpointError(f"checkpoint {path} is damaged: {problem}")
    return _read(path)


def _read(path: Path) -> dict[str, Any]:
    try:
        return torch.load(path / STATE, weights_only=False)
    except Exception as error:  # intact bytes this version cannot unpickle
        raise CheckpointError(f"checkpoint {path} cannot be read: {error}".splitlines()[0]) from error


def load_latest(run_dir: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest intact checkpoint of a run and its payload, skipping damaged newer ones with a warning;
    None when the run has no checkpoint yet."""
    found = checkpoint_dirs(run_dir)
    damaged = []
    for path in reversed(found):
        problem = damage(path)
        if problem is None:
            return path, _read(path)
        log.warning("checkpoint %s is damaged (%s): skipped for the one before it", path, problem)
        damaged.append(f"{path.name}: {problem}")
    if found:
        raise CheckpointError(f"no intact checkpoint in {run_dir / 'checkpoints'} ({'; '.join(damaged)}): "
                              f"delete that directory to train {run_dir} again from step 0, or start a new run")
    return None


class CheckpointWriter:
    """One checkpoint write in flight at a time, on a background thread.

    The payload's tensors are not copied: the trainer must call ``wait()`` before anything
    mutates them (the next optimizer step), which keeps every checkpoint consistent.
    """

    def __init__(self, run_dir: Path, keep: int):
        self.run_dir, self.keep = run_dir, keep
        self._thread: threading.Thread | None = None
        self._failure: CheckpointError | None = None

    def save(self, step: int, payload: dict[str, Any]) -> None:
        self.wait()
        self._thread = threading.Thread(target=self._write, args=(step, payload), name=f"checkpoint-{step}")
        self._thread.start()

    def _write(self, step: int, payload: dict[str, Any]) -> None:
        try:
            save_checkpoint(self.run_dir, step, payload, self.keep)
        except BaseException as error:  # raised on the training thread by wait(), as one line
            self._failure = CheckpointError(write_failure(self.run_dir, step, error))
            self._failure.__cause__ = error

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure


def write_failure(run_dir: Path, step: int, error: BaseException) -> str:
    """One line for a checkpoint that could not be written: a full disk (torch reports it as a stream error, not
    as ENOSPC) named as such, and how to go on from the checkpoints already written."""
    free_mib = shutil.disk_usage(run_dir).free / 2**20
    earlier = checkpoint_dirs(run_dir)
    size_mib = (earlier[-1] / STATE).stat().st_size / 2**20 if earlier else 0.0
    if free_mib < size_mib:
        cause = f"the disk is full ({free_mib:.0f} MiB free, a checkpoint takes {size_mib:.0f} MiB)"
    else:
        cause = f"{(str(error).strip() or type(error).__name__).splitlines()[0]} ({free_mib:.0f} MiB free)"
    then = (f"`autotelic resume {run_dir}` continues from {earlier[-1].name}" if earlier
            else "start the run again: it has no earlier checkpoint")
    where = run_dir / "checkpoints"
    return f"writing the checkpoint of step {step} in {where} failed: {cause}; free space, then {then}"
