"""A self-evolving curriculum over (task family, difficulty level) arms.

Each arm keeps a running estimate p of the solver's pass rate on it. An arm's value is p(1-p),
the reward variance of a Bernoulli verifier: zero where the solver always fails or always
succeeds (GRPO gets no signal there), largest where it is partly right. Arms are drawn by
Boltzmann sampling over values, so the creator follows the solver's frontier as it moves:
easy levels fade once mastered and harder ones rise once partly solved. Untried arms start at an
optimistic prior so every arm is probed. ``strategy="uniform"`` draws arms uniformly (ablation).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from autotelic.tasks import TaskFamily, get_family
from autotelic.types import Group, Task

MAX_DRAWS_PER_TASK = 200


class EmptyFamilyError(ValueError):
    pass


@dataclass
class Arm:
    family: str
    level: int
    pass_rate: float
    pulls: int = 0

    @property
    def key(self) -> str:
        return f"{self.family}/L{self.level}"

    @property
    def value(self) -> float:
        return self.pass_rate * (1.0 - self.pass_rate)


@dataclass
class LearnabilityCurriculum:
    families: list[str]
    levels: list[int]
    seed: int
    exclude: set[str] = field(default_factory=set)
    """Task uids never to hand out (the held-out set)."""
    strategy: str = "learnability"
    temperature: float = 0.1
    ema: float = 0.5
    prior_pass_rate: float = 0.5

    def __post_init__(self) -> None:
        if not self.families:
            raise EmptyFamilyError("curriculum.families is empty: name at least one task family")
        if self.strategy not in ("learnability", "uniform"):
            raise ValueError(f"unknown curriculum strategy '{self.strategy}'; choose learnability or uniform")
        self._families: dict[str, TaskFamily] = {name: get_family(name) for name in self.families}
        self.arms = [
            Arm(name, level, self.prior_pass_rate)
            for name, family in self._families.items() for level in self.levels if level in family.levels
        ]
        if not self.arms:
            raise EmptyFamilyError(f"no family in {self.families} has any of the levels {self.levels}")
        self.rng = random.Random(self.seed)

    def probabilities(self) -> list[float]:
        if self.strategy == "uniform":
            return [1.0 / len(self.arms)] * len(self.arms)
        scores = [arm.value / self.temperature for arm in self.arms]
        top = max(scores)
        weights = [math.exp(s - top) for s in scores]
        total = sum(weights)
        return [w / total for w in weights]

    def mix(self) -> dict[str, float]:
        return {arm.key: p for arm, p in zip(self.arms, self.probabilities())}

    def _draw_task(self, arm: Arm) -> Task:
        family = self._families[arm.family]
        for _ in range(MAX_DRAWS_PER_TASK):
            task = family.generate(self.rng, arm.level)
            if task.uid not in self.exclude:
                return task
        raise EmptyFamilyError(
            f"task family '{arm.family}' level {arm.level} produced only held-out tasks in "
            f"{MAX_DRAWS_PER_TASK} draws: its task space is too small"
        )

    def next_tasks(self, count: int) -> list[Task]:
        arms = self.rng.choices(self.arms, weights=self.probabilities(), k=count)
        return [self._draw_task(arm) for arm in arms]

    def observe(self, groups: list[Group]) -> dict[str, float]:
        """Update each drawn arm's pass rate with the mean reward of its groups this step."""
        by_arm: dict[tuple[str, int], list[float]] = {}
        for group in groups:
            if group.dropped_by == "reward_error":
                continue
            by_arm.setdefault((group.task.family, group.task.level), []).extend(group.rewards)
        for arm in self.arms:
            rewards = by_arm.get((arm.family, arm.level))
            if rewards:
                arm.pass_rate = (1 - self.ema) * arm.pass_rate + self.ema * sum(rewards) / len(rewards)
                arm.pulls += 1
        weights = self.probabilities()
        return {
            "curriculum/mean_level": sum(p * arm.level for p, arm in zip(weights, self.arms)),
            "curriculum/entropy": -sum(p * math.log(p) for p in weights if p > 0),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "arms": [(arm.family, arm.level, arm.pass_rate, arm.pulls) for arm in self.arms],
            "rng": self.rng.getstate(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = {(family, level): (rate, pulls) for family, level, rate, pulls in state["arms"]}
        for arm in self.arms:
            if (arm.family, arm.level) in saved:
                arm.pass_rate, arm.pulls = saved[(arm.family, arm.level)]
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
