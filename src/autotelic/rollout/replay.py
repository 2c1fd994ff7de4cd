"""Replay: where kept groups wait to be trained on.

``OnPolicyBuffer`` hands each group to exactly one update (GRPO's default). ``ReplayBuffer`` also
keeps the most informative groups (highest reward std) and mixes a few of them into later batches,
as long as they were sampled at most ``max_staleness`` policy versions ago; the loss corrects for
their age with the ratio to their recorded sampling log-probs (clipped, or decoupled with a
truncated importance weight: ``algorithm.off_policy``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotelic.rollout.filter import reward_std
from autotelic.types import Group


def group_version(group: Group) -> int:
    return min(s.policy_version for s in group.samples)


@dataclass
class OnPolicyBuffer:
    groups: list[Group] = field(default_factory=list)

    def add(self, groups: list[Group]) -> None:
        self.groups.extend(g for g in groups if g.kept)

    def sample(self, policy_version: int) -> tuple[list[Group], dict[str, float]]:
        batch, self.groups = self.groups, []
        return batch, {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


@dataclass
class _Stored:
    group: Group
    priority: float
    uses: int = 0


@dataclass
class ReplayBuffer:
    capacity: int = 64
    max_staleness: int = 4
    replay_groups: int = 4
    max_reuse: int = 2
    fresh: list[Group] = field(default_factory=list)
    stored: list[_Stored] = field(default_factory=list)

    def add(self, groups: list[Group]) -> None:
        kept = [g for g in groups if g.kept]
        self.fresh.extend(kept)

    def sample(self, policy_version: int) -> tuple[list[Group], dict[str, float]]:
        """The fresh groups plus up to ``replay_groups`` stored ones, highest priority first; then the
        fresh groups join the store and the oldest, most used or least informative ones leave it."""
        self.stored = [s for s in self.stored
                       if policy_version - group_version(s.group) <= self.max_staleness and s.uses < self.max_reuse]
        replayed = sorted(self.stored, key=lambda s: -s.priority)[:self.replay_groups]
        for item in replayed:
            item.uses += 1
        staleness = [policy_version - group_version(item.group) for item in replayed]
        batch = self.fresh + [item.group for item in replayed]
        self.stored.extend(_Stored(g, reward_std(g)) for g in self.fresh)
        self.stored = sorted(self.stored, key=lambda s: -s.priority)[:self.capacity]
        self.fresh = []
        return batch, {
            "replay/replayed_groups": float(len(replayed)),
            "replay/buffer_groups": float(len(self.stored)),
            "replay/mean_staleness": sum(staleness) / len(staleness) if staleness else 0.0,
        }

    def state_dict(self) -> dict[str, Any]:
        return {"stored": self.stored}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stored = state["stored"]
