"""The ``verifier`` reward: each task scored by its own family's verifier.

The families' checks are strict on purpose (an integer answer must be the completion's first number,
``autotelic.text``). ``VerifierReward`` applies whichever verifier the task's family defines; with
``partial_credit`` it pays a graded family's near misses (reasoning-gym's) in training. Held-out accuracy is
always the strict check.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autotelic.tasks import GradedFamily, get_family
from autotelic.types import Task


@dataclass
class VerifierReward:
    """Each completion scored by its task family's own verifier (the family's ``score``)."""

    partial_credit: bool = False
    """Pay graded families' partial credit (``partial_score``, e.g. reasoning-gym's) instead of their strict 0/1.
    A training reward only: held-out accuracy stays strict."""
    name: str = field(default="verifier", init=False)

    def __call__(self, task: Task, completions: list[str]) -> list[float]:
        family = get_family(task.family)
        score = family.partial_score if self.partial_credit and isinstance(family, GradedFamily) else family.score
        return [float(score(task, completion)) for completion in completions]
