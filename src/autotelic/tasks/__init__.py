"""Procedural task families with verifiers: the creator's raw material.

A family turns (rng, level) into a Task and scores a completion of it. ``get_family`` looks a
family up by name; families from reasoning-gym register under the ``rg_`` prefix, a user's data under
``file:`` and ``hf:`` (``tasks/files.py``), an environment's own tasks under their name once it loads
(``envs/registry.py``).
"""

from __future__ import annotations

import random
from typing import Protocol, runtime_checkable

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


_ADDED: dict[str, TaskFamily] = {}  # loaded environments' own families (``envs/registry.py`` adds them)


def add_family(family: TaskFamily) -> None:
    """Makes ``family`` findable by its name (the first one added under a name stays)."""
    _ADDED.setdefault(family.name, family)


def _built_in() -> dict[str, TaskFamily]:
    from autotelic.tasks.code import CODE_FAMILIES
    from autotelic.tasks.games import GAME_FAMILIES
    from autotelic.tasks.numbers import NUMBER_FAMILIES
    from autotelic.tasks.textarena_games import TEXTARENA_FAMILIES
    from autotelic.tasks.web import WEB_FAMILIES

    return {**NUMBER_FAMILIES, **GAME_FAMILIES, **CODE_FAMILIES, **TEXTARENA_FAMILIES, **WEB_FAMILIES}


def family_names() -> list[str]:
    """The built-in families' names (besides rg_<dataset>, file:PATH, hf:NAME and loaded environments' own)."""
    return sorted(_built_in())


def get_family(name: str) -> TaskFamily:
    from autotelic.tasks.files import data_family, is_data_family
    from autotelic.tasks.rgym import reasoning_gym_family

    families = _built_in()
    if name in families:
        return families[name]
    if name.startswith("rg_"):
        return reasoning_gym_family(name[len("rg_"):])
    if is_data_family(name):
        return data_family(name)
    if name in _ADDED:  # a loaded environment's own tasks
        return _ADDED[name]
    known = ", ".join(sorted(families)) + (", rg_<reasoning-gym dataset> (e.g. rg_chain_sum), file:PATH (your JSONL, "
                                           "JSON, CSV or Parquet) or hf:NAME[:CONFIG][:SPLIT]")
    raise UnknownFamilyError(f"unknown task family '{name}'; known: {known}")


def task_uid(family: str, prompt: str) -> str:
    return f"{family}:{prompt}"
