"""Curricula: the creator that decides which tasks to generate next (the Replay stage's other half).

``BanditCurriculum`` draws (family, level) arms by an estimated learning value;
``PromptPoolCurriculum`` draws concrete prompts from a growing pool by how informative they were;
``PrefixCurriculum`` adds ReST-GRPO's partial-solution prompts to either.
"""

from __future__ import annotations

from typing import Any, Protocol

from autotelic.curricula.bandit import BanditCurriculum, EmptyFamilyError
from autotelic.curricula.prefixes import PrefixCurriculum
from autotelic.curricula.regret import EmptyPoolError, PromptPoolCurriculum
from autotelic.types import Group, Task


class Curriculum(Protocol):
    def next_tasks(self, count: int) -> list[Task]: ...

    def observe(self, groups: list[Group]) -> dict[str, float]: ...

    def mix(self) -> dict[str, float]: ...

    def estimated_pass_rate(self, task: Task) -> float: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


__all__ = ["BanditCurriculum", "Curriculum", "EmptyFamilyError", "EmptyPoolError", "PrefixCurriculum",
           "PromptPoolCurriculum"]
