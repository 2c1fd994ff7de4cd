"""A run's directory and what a checkpoint holds: the loop's counters (``TrainState``), each agent's weights,
optimizer and sampling generator, every part with state (``Stateful``) by name, and the size of each step log,
so that a resume cuts the logs back to exactly what the checkpointed steps wrote."""

from __future__ import annotations

import copy
import os
import shutil
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import torch

from autotelic.abilities import Stateful
from autotelic.backends.hf import HFPolicy
from autotelic.checkpoint import (CheckpointWriter, checkpoint_dirs, checkpoint_step, latest_checkpoint,
                                  load_latest)
from autotelic.checks import TrainingError
from autotelic.config import RunConfig

# What the steps append to: a checkpoint records each one's size, and resuming cuts them back to it.
STEP_LOGS = ("metrics.jsonl", "rollouts.jsonl", "population.jsonl")


@dataclass
class TrainState:
    step: int = 0
    train_seconds: float = 0.0
    wall_seconds: float = 0.0
    completion_tokens: int = 0
    eval_before: dict[str, Any] | None = None
    evals: list[dict[str, Any]] = field(default_factory=list)  # {"step", "accuracy", ...} over time
    pairs_seen: int = 0  # offline DPO: position in the (shuffled, cycled) preference dataset
    discussion_before: dict[str, Any] | None = None  # CoMAS: each agent alone and their discussion, before training


def holds_run(run_dir: Path) -> bool:
    """Whether a run has started in ``run_dir`` (it writes config.yaml as it starts): no new run may start there."""
    return (run_dir / "config.yaml").exists()


def new_run_dir(config: RunConfig) -> Path:
    name = config.logging.run_name or datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = Path(config.logging.runs_dir) / name
    if holds_run(run_dir):
        raise TrainingError(f"run directory {run_dir} already holds a run: use `autotelic resume {run_dir}`")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # runs_dir is a file, read-only, ...
        raise TrainingError(f"logging.runs_dir={config.logging.runs_dir}: cannot make run directory {run_dir} "
                            f"({error.strerror}); pick a writable directory") from None
    return run_dir


def run_config_path(run_dir: Path) -> Path:
    """The config.yaml of run directory ``run_dir``, which must be one."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise TrainingError(f"{run_dir} is not a run directory (no config.yaml)")
    return path


class RunCheckpoints:
    """A run's checkpoints: written in the background (checkpoint.py), read back on resume."""

    def __init__(self, run_dir: Path, keep: int):
        self.run_dir, self.writer = run_dir, CheckpointWriter(run_dir, keep)

    def wait(self) -> None:
        self.writer.wait()

    def save(self, state: TrainState, agents: list[HFPolicy], parts: dict[str, Stateful],
             extra: dict[str, Any]) -> None:
        """``agents[0]`` is the policy (its state at the top level, as the FSDP ranks read it); ``parts`` by
        name; ``extra``: what the trainer keeps itself (rollouts collected ahead, the FSDP optimizer)."""
        self.writer.save(state.step, {
            "state": copy.deepcopy(state.__dict__),
            **agents[0].training_state(),
            "agents": [agent.training_state() for agent in agents[1:]],  # CoMAS: the other agents
            **{name: copy.deepcopy(part.state_dict()) for name, part in parts.items()},
            "torch_rng": torch.get_rng_state(),
            "logs": {name: _size(self.run_dir / name) for name in STEP_LOGS},
            **extra,
        })

    def latest(self) -> Path | None:
        """The newest checkpoint written (none in flight)."""
        self.wait()
        return latest_checkpoint(self.run_dir)

    def discard_from(self, step: int) -> None:
        """Removes the checkpoints of ``step`` and later (weights found diverged): a resume must not load them."""
        self.wait()
        for path in checkpoint_dirs(self.run_dir):
            if checkpoint_step(path) >= step:
                shutil.rmtree(path)

    def restore(self, load: Callable[[dict[str, Any]], None]) -> None:
        """The newest whole checkpoint into ``load``, and the step logs cut back to what it covers: rows of later
        steps go, a line cut short by a kill with them (with no checkpoint yet, the run starts over)."""
        found = load_latest(self.run_dir)
        sizes: dict[str, int] = {}
        if found is not None:
            path, payload = found
            try:
                load(payload)
            except (KeyError, ValueError, RuntimeError) as error:  # shapes, agents or stages of another config
                raise TrainingError(f"checkpoint {path} does not fit this run's config: {error}; resume with the "
                                    "settings it was written with, or start a new run") from None
            sizes = payload["logs"]
        for name in STEP_LOGS:
            path = self.run_dir / name
            if _size(path) > sizes.get(name, 0):
                os.truncate(path, sizes.get(name, 0))


def load_payload(payload: dict[str, Any], agents: list[HFPolicy], parts: dict[str, Stateful]) -> TrainState:
    """Puts a checkpoint back into the agents and parts; a part the checkpoint has no state for keeps its own."""
    others = payload.get("agents", [])
    if len(others) != len(agents) - 1:
        raise TrainingError(f"the checkpoint holds {len(others) + 1} agents, the config {len(agents)}")
    for agent, saved in zip(agents, [payload, *others]):
        agent.load_training_state(saved)
    for name, part in parts.items():
        if payload.get(name) is not None:
            part.load_state_dict(payload[name])
    torch.set_rng_state(payload["torch_rng"])
    return TrainState(**payload["state"])


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0
