"""Replay: where kept groups wait to be trained on.

``OnPolicyBuffer`` hands each group to exactly one update (GRPO's default). Off-policy buffers
with staleness limits plug in through the same add/sample pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autotelic.types import Group


@dataclass
class OnPolicyBuffer:
    groups: list[Group] = field(default_factory=list)

    def add(self, groups: list[Group]) -> None:
        self.groups.extend(g for g in groups if g.kept)

    def sample(self) -> list[Group]:
        batch, self.groups = self.groups, []
        return batch
