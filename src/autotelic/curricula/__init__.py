"""Curricula: the creator that decides which tasks to generate next (the Replay stage's other half)."""

from __future__ import annotations

from typing import Any, Protocol

from autotelic.types import Group, Task


class Curriculum(Protocol):
    def next_tasks(self, count: int) -> list[Task]: ...

    def observe(self, groups: list[Group]) -> dict[str, float]: ...

    def mix(self) -> dict[str, float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...
