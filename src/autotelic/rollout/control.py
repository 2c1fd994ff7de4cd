"""Control: how much to generate, where to spend it, and what to do with overlong samples.

- ``Budget.plan`` sizes a generation round by the task, sample and token budgets; ``enforce`` drops
  groups past the step's completion-token budget (``token_budget``).
- ``adaptive_group_sizes`` spreads the step's samples over tasks by their estimated pass rate p:
  more where p(1-p) is high (the outcome is uncertain), fewer where p is near 0 or 1.
- ``decided`` is the early-exit test: a probe of a few samples that all agree ends the group.
- ``shape_overlong`` (DAPO's soft overlong punishment) and ``mask_truncated`` (overlong filtering)
  handle samples cut at the length cap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autotelic.types import Group


@dataclass(frozen=True)
class Budget:
    tasks_per_step: int
    group_size: int
    max_new_tokens: int
    max_tokens_per_step: int | None = None
    max_samples_per_step: int | None = None

    def plan(self, tasks_wanted: int | None = None, tokens_spent: int = 0, samples_spent: int = 0) -> int:
        """Tasks to generate now: what is wanted, capped so the worst case fits the token and sample budgets left
        (a task is planned at ``group_size`` samples of ``max_new_tokens`` tokens)."""
        wanted = self.tasks_per_step if tasks_wanted is None else tasks_wanted
        if self.max_tokens_per_step is not None:
            worst_case_per_task = self.group_size * self.max_new_tokens
            wanted = min(wanted, (self.max_tokens_per_step - tokens_spent) // worst_case_per_task)
        if self.max_samples_per_step is not None:
            wanted = min(wanted, (self.max_samples_per_step - samples_spent) // self.group_size)
        return max(0, wanted)

    def enforce(self, groups: list[Group]) -> int:
        """Drop kept groups beyond the token budget; returns the completion tokens spent."""
        spent = 0
        for group in groups:
            spent += group.num_completion_tokens
            if self.max_tokens_per_step is not None and spent > self.max_tokens_per_step and group.kept:
                group.dropped_by = "token_budget"
        return spent


def adaptive_group_sizes(pass_rates: list[float], total: int, low: int, high: int) -> list[int]:
    """Split ``total`` samples over tasks in proportion to p(1-p) (+ a floor so no weight is zero),
    each between ``low`` and ``high``; rounding gives the remainder to the most uncertain tasks and
    takes any excess from the least uncertain ones."""
    if not pass_rates:
        return []
    if low > high or low < 1:
        raise ValueError(f"min_group_size {low} must be >= 1 and <= max_group_size {high}")
    weights = [p * (1 - p) + 0.02 for p in pass_rates]
    scale = total / sum(weights)
    sizes = [min(high, max(low, math.floor(w * scale))) for w in weights]
    by_uncertainty = sorted(range(len(sizes)), key=lambda i: -weights[i])
    spare = total - sum(sizes)  # rounding and the bounds leave some over or under: settle it by uncertainty
    while spare > 0 and any(s < high for s in sizes):
        for i in by_uncertainty:
            if spare > 0 and sizes[i] < high:
                sizes[i] += 1
                spare -= 1
    while spare < 0 and any(s > low for s in sizes):
        for i in reversed(by_uncertainty):
            if spare < 0 and sizes[i] > low:
                sizes[i] -= 1
                spare += 1
    return sizes


def decided(group: Group) -> bool:
    """A probe whose rewards all agree: the full group would most likely be zero-variance too."""
    rewards = group.rewards
    return max(rewards) - min(rewards) <= 1e-8


def overlong_penalty(length: int, max_new_tokens: int, buffer: int) -> float:
    """DAPO: 0 up to max - buffer tokens, then falling linearly to -1 at the cap."""
    start = max_new_tokens - buffer
    if length <= start:
        return 0.0
    return -min(1.0, (length - start) / max(1, buffer))


def shape_overlong(groups: list[Group], max_new_tokens: int, buffer: int) -> None:
    """Add the soft overlong penalty to every scored sample's reward, and to its last turn's reward where turn
    credit reads them (an episode's length is its turns' and observations' together)."""
    for group in groups:
        for sample in group.samples:
            if sample.reward is not None:
                penalty = overlong_penalty(len(sample.token_ids), max_new_tokens, buffer)
                sample.reward += penalty
                if sample.info.get("turn_rewards"):
                    sample.info["turn_rewards"][-1] += penalty


def mask_truncated(groups: list[Group]) -> int:
    """Overlong filtering: samples cut at the cap keep their reward (their group's baseline stays
    honest) but none of their tokens is trained on. Returns how many were masked."""
    masked = 0
    for group in groups:
        for sample in group.samples:
            if not sample.finished:
                sample.mask = [0] * len(sample.token_ids)
                masked += 1
    return masked
