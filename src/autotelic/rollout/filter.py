"""Filter: reward functions score samples, then group filters keep or drop whole groups.

A reward function that raises does not stop the run: its group is dropped as
``reward_error`` with a one-line warning naming the function, task and error.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Protocol

from autotelic.tasks import get_family
from autotelic.types import Group, Task

log = logging.getLogger(__name__)

RewardFn = Callable[[Task, str], float]


def verifier_reward(task: Task, completion: str) -> float:
    """The task family's own verifier."""
    return get_family(task.family).score(task, completion)


class GroupFilter(Protocol):
    name: str

    def keep(self, group: Group) -> bool: ...


@dataclass(frozen=True)
class ZeroVarianceFilter:
    """Groups whose rewards are all equal give every sample a zero advantage: no signal."""

    name: str = "zero_variance"

    def keep(self, group: Group) -> bool:
        rewards = group.rewards
        return max(rewards) - min(rewards) > 1e-8


@dataclass
class FilterStats:
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)

    def as_metrics(self) -> dict[str, float]:
        metrics = {"filter/kept_groups": float(self.kept)}
        metrics.update({f"filter/dropped_{name}": float(count) for name, count in self.dropped.items()})
        return metrics


def score_groups(groups: list[Group], reward_fn: RewardFn) -> None:
    """Fill every sample's reward; a raising or non-finite reward drops the group."""
    name = getattr(reward_fn, "__name__", type(reward_fn).__name__)
    for group in groups:
        try:
            for sample in group.samples:
                value = float(reward_fn(group.task, sample.text))
                if not math.isfinite(value):
                    raise ValueError(f"returned {value}")
                sample.reward = value
        except Exception as error:  # a user's reward function may raise anything
            log.warning("reward function %s failed on task %r: %s: %s; group dropped",
                        name, group.task.uid, type(error).__name__, error)
            group.dropped_by = "reward_error"


def apply_filters(groups: list[Group], filters: list[GroupFilter]) -> FilterStats:
    """Mark dropped groups (first filter to reject names the reason) and count the outcome."""
    stats = FilterStats()
    for group in groups:
        for group_filter in filters:
            if group.kept and not group_filter.keep(group):
                group.dropped_by = group_filter.name
        if group.kept:
            stats.kept += 1
        else:
            stats.dropped[group.dropped_by] += 1
    return stats
