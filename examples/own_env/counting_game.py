"""A counting game, a user's own multi-turn environment: the policy counts up from a number, one per turn.

autotelic finds it by its module name (``generate.env=counting_game`` with this folder on PYTHONPATH) and calls
``load_environment(**generate.env_args)``, which returns the environment factory, the tasks it is played on
and the rewards a run uses unless it names its own.
"""

from __future__ import annotations

import re
from functools import partial

from autotelic.envs import Step
from autotelic.envs.registry import EnvironmentSpec
from autotelic.types import Task

NUMBER = re.compile(r"-?\d+")


class CountingGame:
    """Each turn the policy says the next number; the game answers "yes, go on" or the number it wanted.
    Each right number pays 1/turns, so a perfect game returns 1 (held-out accuracy counts those)."""

    def __init__(self, turns: int) -> None:
        self.turns = turns
        self.expected, self.said = 0, 0

    def reset(self, task: Task) -> str:
        self.expected, self.said = int(task.answer), 0
        return task.prompt

    def step(self, action: str) -> Step:
        found = NUMBER.search(action)
        if found is None:  # no number: an invalid move, the turn is not counted
            return Step("Reply with one number.", 0.0, False, {"valid": False})
        right = int(found.group()) == self.expected
        self.said += 1
        done = self.said == self.turns
        feedback = "Yes, go on." if right else f"No, it was {self.expected}. Go on."
        self.expected += 1
        info = {"valid": True, "right": right}
        return Step("Done." if done else feedback, (1.0 if right else 0.0) / self.turns, done, info)

    def close(self) -> None:  # holds nothing to release
        pass


def load_environment(turns: int = 2, largest: int = 60) -> EnvironmentSpec:
    """Games starting from 1..largest (level 1 below 20, level 2 above), ``turns`` numbers each."""
    tasks = [Task(f"Let's count up from {start}, one number per turn. Say the next number only.", str(start + 1),
                  "counting", 1 if start < 20 else 2, f"counting:{start}") for start in range(1, largest + 1)]
    return EnvironmentSpec(partial(CountingGame, turns), tasks, [{"name": "env"}])
