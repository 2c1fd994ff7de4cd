"""Helpers for tests that read a run's logged rows (rollouts.jsonl, eval_*.jsonl)."""

from __future__ import annotations

from autotelic.tasks import get_family
from autotelic.types import Task


def row_task(row: dict) -> Task:
    """The task a logged row answered, as its family's verifier reads it."""
    return Task(prompt=row["prompt"], answer=row["answer"], family=row["family"], level=row["level"], uid="")


def verified(row: dict) -> float:
    """The family's verifier on the row's completion, computed afresh."""
    return get_family(row["family"]).score(row_task(row), row["completion"])
