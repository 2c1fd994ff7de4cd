"""Procedural task families with verifiers: the creator's raw material.

A family turns (rng, level) into a Task and scores a completion of it. ``get_family`` looks a
family up by name: the built-in ones (``FAMILIES``), families from reasoning-gym under the ``rg_`` prefix, a
user's data under ``file:`` and ``hf:`` (``tasks/files.py``), an environment's own tasks under their name once it
loads (``envs/registry.py``).
"""

from __future__ import annotations

import random
from typing import Protocol, runtime_checkable

from autotelic.registry import Registry
from autotelic.types import Task


class TaskFamily(Protocol):
    name: str
    levels: tuple[int, ...]

    def generate(self, rng: random.Random, level: int) -> Task: ...

    def score(self, task: Task, completion: str) -> float:
        """1.0 when the completion solves the task, else 0.0: strict, since held-out accuracy is its mean."""
        ...


@runtime_checkable
class GradedFamily(Protocol):
    """A family whose verifier also grades near misses (reasoning-gym's partial credit), for training only."""

    def partial_score(self, task: Task, completion: str) -> float: ...


class UnknownFamilyError(ValueError):
    pass


# The built-in families, loaded on first use (their modules import this one); a loaded environment adds its own
# (``add_family``), an installed package announces its own under the ``autotelic.task_families`` entry points.
FAMILIES: Registry[TaskFamily] = Registry("task family", tables=(
    "autotelic.tasks.numbers:NUMBER_FAMILIES", "autotelic.tasks.games:GAME_FAMILIES",
    "autotelic.tasks.code:CODE_FAMILIES", "autotelic.tasks.textarena_games:TEXTARENA_FAMILIES",
    "autotelic.tasks.web:WEB_FAMILIES"))


def add_family(family: TaskFamily) -> None:
    """Makes ``family`` findable by its name (the first one added under a name stays)."""
    if family.name not in FAMILIES:
        FAMILIES.register(family.name, family)


def family_names() -> list[str]:
    """The families' names (besides rg_<dataset>, file:PATH and hf:NAME)."""
    return sorted(FAMILIES.names())


def get_family(name: str, columns: dict[str, str] | None = None) -> TaskFamily:
    """The family ``name``; ``columns`` (the run's ``curriculum.columns``) maps a user's data file's column names."""
    from autotelic.tasks.files import data_family, is_data_family
    from autotelic.tasks.rgym import reasoning_gym_family

    if name.startswith("rg_"):
        return reasoning_gym_family(name[len("rg_"):])
    if is_data_family(name):
        return data_family(name, columns)
    family = FAMILIES.find(name)
    if family is not None:
        return family
    known = ", ".join(family_names()) + (", rg_<reasoning-gym dataset> (e.g. rg_chain_sum), file:PATH (your JSONL, "
                                         "JSON, CSV or Parquet) or hf:NAME[:CONFIG][:SPLIT]")
    raise UnknownFamilyError(f"unknown task family '{name}'; known: {known}")


def task_uid(family: str, prompt: str) -> str:
    return f"{family}:{prompt}"
