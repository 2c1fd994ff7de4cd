"""Task families for multi-turn text games; each is played through an environment in ``autotelic.envs``.

A game's task carries what its environment needs (the secret, the turn limit) in ``answer``/``meta``;
scored single-turn, the verifier checks the first reply alone.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from autotelic.tasks import task_uid
from autotelic.text import first_integer_matches
from autotelic.types import Task


@dataclass(frozen=True)
class GuessNumberFamily:
    """Find a secret integer in [1, 10 * 5**(level-1)]; the environment answers "higher" or "lower"."""

    name: str = "guess_number"
    levels: tuple[int, ...] = (1, 2, 3)

    def upper(self, level: int) -> int:
        return 10 * 5 ** (level - 1)

    def generate(self, rng: random.Random, level: int) -> Task:
        upper = self.upper(level)
        secret = rng.randint(1, upper)
        prompt = (f"I am thinking of a whole number from 1 to {upper}. Guess it. After each guess I will say "
                  f"'higher', 'lower' or 'correct'. Reply with only your guess.")
        # the prompt is the same for every secret, so the uid carries the secret too
        return Task(prompt, str(secret), self.name, level, task_uid(self.name, f"{prompt}#{secret}"),
                    meta={"upper": upper})

    def score(self, task: Task, completion: str) -> float:
        return first_integer_matches(completion, task.answer)


GAME_FAMILIES = {family.name: family for family in (GuessNumberFamily(),)}
