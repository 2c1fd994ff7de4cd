"""Guess-the-number: a multi-turn game with feedback, the smallest environment that needs several turns.

Reward 1 for the turn that names the secret, 0 otherwise; a reply without a number is an invalid
action (reported in ``info``) and the episode goes on.
"""

from __future__ import annotations

from autotelic.envs import Step
from autotelic.envs.registry import EnvironmentSpec
from autotelic.tasks import get_family
from autotelic.text import first_integer
from autotelic.types import Task


class GuessNumberEnv:
    def __init__(self) -> None:
        self.secret: int | None = None
        self.guesses: list[int] = []

    def reset(self, task: Task) -> str:
        self.secret, self.guesses = int(task.answer), []
        return task.prompt

    def step(self, action: str) -> Step:
        if self.secret is None:
            raise RuntimeError("step() before reset()")
        guess = first_integer(action)
        if guess is None:
            return Step("Reply with a whole number.", 0.0, False, {"valid": False})
        self.guesses.append(guess)
        if guess == self.secret:
            return Step("correct", 1.0, True, {"valid": True, "guesses": len(self.guesses)})
        return Step("higher" if guess < self.secret else "lower", 0.0, False, {"valid": True})

    def close(self) -> None:  # holds nothing to release
        pass


def load_environment() -> EnvironmentSpec:
    """Played on the guess_number family, paid by the episode's return."""
    return EnvironmentSpec(GuessNumberEnv, get_family("guess_number"), [{"name": "env"}])
