"""Rule verifiers for procedurally generated tasks.

They are strict on purpose: the answer must be the first number in the completion, so the policy
is paid for answering, not for listing candidates and letting a lenient parser pick one.
``VerifierReward`` applies whichever verifier the task's family defines; with ``partial_credit`` it pays a
graded family's near misses (reasoning-gym's) in training. Held-out accuracy is always the strict check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from autotelic.tasks import GradedFamily, get_family
from autotelic.types import Task

_INTEGER = re.compile(r"-?\d[\d,]*")


def first_integer(text: str) -> int | None:
    """The first integer written in ``text`` (thousands separators allowed), or None."""
    match = _INTEGER.search(text)
    if match is None:
        return None
    digits = match.group().replace(",", "")
    return int(digits) if digits.lstrip("-") else None


def first_integer_matches(completion: str, answer: str) -> float:
    """1.0 when the first integer of the completion equals the integer ``answer``."""
    return float(first_integer(completion) == int(answer))


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
