"""A self-evolving curriculum over (task family, difficulty level) arms.

Each arm has a value; arms are drawn by Boltzmann sampling over values, so the creator follows
the solver's frontier as it moves. How the value is estimated is the ``value`` setting:

- ``learnability``: the arm's running pass rate p gives p(1-p), the reward variance of a Bernoulli
  verifier: zero where the solver always fails or always succeeds (GRPO gets no signal there),
  largest where it is partly right.
- ``sec``: Self-Evolving Curriculum (Chen et al. 2025): a TD(0) running average Q of the mean
  absolute advantage of the arm's samples, a proxy for how much a policy-gradient step learns there.
- ``uniform``: every arm equally likely (ablation).

Untried arms start at optimistic priors so every arm is probed. Every value kind also tracks each
arm's running pass rate, which other stages read to size groups.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from autotelic.curricula.rngstate import rng_state, set_rng_state
from autotelic.heldout import HeldOut
from autotelic.tasks import TaskFamily, get_family
from autotelic.types import Group, Task

VALUE_KINDS = ("learnability", "sec", "uniform")
MAX_DRAWS_PER_TASK = 200


class EmptyFamilyError(ValueError):
    pass


def arm_key(family: str, level: int) -> str:
    return f"{family}/L{level}"


@dataclass
class Arm:
    family: str
    level: int
    pass_rate: float
    """Running estimate of the solver's mean reward on this arm (every value kind keeps it)."""
    q: float
    """SEC's running estimate of the mean absolute advantage of this arm's samples."""
    pulls: int = 0

    @property
    def key(self) -> str:
        return arm_key(self.family, self.level)


def boltzmann(values: list[float], temperature: float) -> list[float]:
    """softmax(values / temperature), shifted by the largest score so ``exp`` cannot overflow."""
    scores = [v / temperature for v in values]
    top = max(scores)
    weights = [math.exp(s - top) for s in scores]
    total = sum(weights)
    return [w / total for w in weights]


def mean_absolute_advantage(groups: list[Group]) -> float:
    """Mean |reward - its group's mean reward| over every sample of ``groups``.

    Unnormalised on purpose: a std-normalised advantage has mean magnitude near 1 for any group
    with nonzero variance, so it would only tell "some variance" from "none", not how much.
    """
    deviations: list[float] = []
    for group in groups:
        rewards = group.rewards
        mean = sum(rewards) / len(rewards)
        deviations.extend(abs(r - mean) for r in rewards)
    return sum(deviations) / len(deviations)


@dataclass
class BanditCurriculum:
    families: list[str]
    levels: list[int]
    seed: int
    heldout: HeldOut
    """Tasks never to hand out (required: no curriculum exists that could draw the held-out set)."""
    value: str = "learnability"
    """How an arm's value is estimated: learnability, sec or uniform (see the module docstring)."""
    temperature: float = 0.1
    """Boltzmann temperature over arm values; lower is greedier."""
    ema: float = 0.5
    """Weight of the newest observation in each arm's running pass rate."""
    prior_pass_rate: float = 0.5
    """Pass rate assumed for arms never tried (0.5 maximises p(1-p), so each gets explored)."""
    alpha: float = 0.5
    """SEC: TD(0) step size, the weight of this step's mean absolute advantage in Q."""
    decay: float = 0.0
    """SEC: per step, arms not drawn move this fraction of the way back to ``prior_value``.
    0 is the paper; a positive value lets stale low estimates recover so those arms get re-probed."""
    prior_value: float = 0.5
    """SEC: initial Q, optimistic: 0.5 is the largest mean absolute advantage of 0/1 rewards."""

    def __post_init__(self) -> None:
        if not self.families:
            raise EmptyFamilyError("curriculum.families is empty: name at least one task family")
        if self.value not in VALUE_KINDS:
            raise ValueError(f"unknown curriculum value '{self.value}'; choose one of {', '.join(VALUE_KINDS)}")
        if self.temperature <= 0:
            raise ValueError(f"curriculum temperature must be positive, not {self.temperature}")
        self._families: dict[str, TaskFamily] = {name: get_family(name) for name in self.families}
        self.arms = [
            Arm(name, level, self.prior_pass_rate, self.prior_value)
            for name, family in self._families.items() for level in self.levels if level in family.levels
        ]
        if not self.arms:
            raise EmptyFamilyError(f"no family in {self.families} has any of the levels {self.levels}")
        self._arm_of = {(arm.family, arm.level): arm for arm in self.arms}
        self.rng = random.Random(self.seed)

    def values(self) -> list[float]:
        if self.value == "sec":
            return [arm.q for arm in self.arms]
        if self.value == "learnability":
            return [arm.pass_rate * (1.0 - arm.pass_rate) for arm in self.arms]
        return [0.0] * len(self.arms)  # uniform: equal values give equal probabilities

    def probabilities(self) -> list[float]:
        return boltzmann(self.values(), self.temperature)

    def mix(self) -> dict[str, float]:
        return {arm.key: p for arm, p in zip(self.arms, self.probabilities())}

    def pass_rates(self) -> dict[str, float]:
        return {arm.key: arm.pass_rate for arm in self.arms}

    def estimated_pass_rate(self, task: Task) -> float:
        """The running pass rate of the task's arm; the prior for a task outside the arms."""
        arm = self._arm_of.get((task.family, task.level))
        return arm.pass_rate if arm is not None else self.prior_pass_rate

    def _draw_task(self, arm: Arm) -> Task:
        family = self._families[arm.family]
        for _ in range(MAX_DRAWS_PER_TASK):
            task = family.generate(self.rng, arm.level)
            if not self.heldout.excludes(task):
                return task
        raise EmptyFamilyError(
            f"task family '{arm.family}' level {arm.level} produced only held-out tasks in "
            f"{MAX_DRAWS_PER_TASK} draws: its task space is too small"
        )

    def next_tasks(self, count: int) -> list[Task]:
        arms = self.rng.choices(self.arms, weights=self.probabilities(), k=count)
        return [self._draw_task(arm) for arm in arms]

    def observe(self, groups: list[Group]) -> dict[str, float]:
        """Update the pass rate and Q of each arm drawn this step; the others' Q decay."""
        by_arm: dict[tuple[str, int], list[Group]] = {}
        for group in groups:
            # a reward error says nothing about the solver; an empty group has no rewards at all
            if group.dropped_by == "reward_error" or not group.samples:
                continue
            by_arm.setdefault((group.task.family, group.task.level), []).append(group)
        for arm in self.arms:
            drawn = by_arm.get((arm.family, arm.level))
            if drawn:
                rewards = [r for group in drawn for r in group.rewards]
                arm.pass_rate = (1 - self.ema) * arm.pass_rate + self.ema * sum(rewards) / len(rewards)
                arm.q = (1 - self.alpha) * arm.q + self.alpha * mean_absolute_advantage(drawn)
                arm.pulls += 1
            else:
                arm.q = (1 - self.decay) * arm.q + self.decay * self.prior_value
        probabilities = self.probabilities()
        metrics = {
            "curriculum/mean_level": sum(p * arm.level for p, arm in zip(probabilities, self.arms)),
            "curriculum/entropy": -sum(p * math.log(p) for p in probabilities if p > 0),
        }
        metrics.update({f"curriculum/value/{arm.key}": v for arm, v in zip(self.arms, self.values())})
        return metrics

    def state_dict(self) -> dict[str, Any]:
        arms = [
            {"family": arm.family, "level": arm.level, "pass_rate": arm.pass_rate, "q": arm.q, "pulls": arm.pulls}
            for arm in self.arms
        ]
        return {"arms": arms, "rng": rng_state(self.rng)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for saved in state["arms"]:
            arm = self._arm_of.get((saved["family"], saved["level"]))
            if arm is not None:  # arms since dropped from the config are forgotten
                arm.pass_rate, arm.q, arm.pulls = saved["pass_rate"], saved["q"], saved["pulls"]
        set_rng_state(self.rng, state["rng"])
