"""Our own number families, each with a difficulty knob (``level``: more digits, more carries).

Every answer is an integer, checked by the strict first-integer verifier.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from autotelic.tasks import task_uid
from autotelic.text import first_integer_matches
from autotelic.types import Task

FORMAT = "Reply with only the number."

# (rng, level) -> (question, integer answer)
Maker = Callable[[random.Random, int], tuple[str, int]]


def _digits(rng: random.Random, n: int) -> int:
    """A number with exactly ``n`` digits (0-9 for n == 1)."""
    return rng.randint(0, 9) if n == 1 else rng.randint(10 ** (n - 1), 10**n - 1)


def _add(rng: random.Random, level: int) -> tuple[str, int]:
    a, b = _digits(rng, level), _digits(rng, max(1, level - 1) if level > 1 else 1)
    return f"What is {a} + {b}?", a + b


def _subtract(rng: random.Random, level: int) -> tuple[str, int]:
    a, b = _digits(rng, level), _digits(rng, level)
    a, b = max(a, b), min(a, b)
    return f"What is {a} - {b}?", a - b


def _compare(rng: random.Random, level: int) -> tuple[str, int]:
    a = _digits(rng, level + 1)
    b = a
    while b == a:
        b = _digits(rng, level + 1)
    return f"Which number is larger, {a} or {b}?", max(a, b)


def _successor(rng: random.Random, level: int) -> tuple[str, int]:
    n = _digits(rng, level + 1)
    return f"What number comes right after {n}?", n + 1


@dataclass(frozen=True)
class NumberFamily:
    name: str
    make: Maker
    levels: tuple[int, ...] = (1, 2, 3)

    def generate(self, rng: random.Random, level: int) -> Task:
        if level not in self.levels:
            raise ValueError(f"family '{self.name}' has levels {self.levels}, not {level}")
        question, answer = self.make(rng, level)
        prompt = f"{question} {FORMAT}"
        return Task(prompt=prompt, answer=str(answer), family=self.name, level=level, uid=task_uid(self.name, prompt))

    def score(self, task: Task, completion: str) -> float:
        return first_integer_matches(completion, task.answer)


NUMBER_FAMILIES: dict[str, NumberFamily] = {
    family.name: family
    for family in (
        NumberFamily("add", _add),
        NumberFamily("subtract", _subtract),
        NumberFamily("compare", _compare),
        NumberFamily("successor", _successor),
    )
}
