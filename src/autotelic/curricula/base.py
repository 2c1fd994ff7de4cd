"""The ``Curriculum`` protocol, and the base of curricula that wrap another one and add derived tasks to it."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from autotelic.types import Group, Task


class Curriculum(Protocol):
    def next_tasks(self, count: int) -> list[Task]: ...

    def observe(self, groups: list[Group]) -> dict[str, float]: ...

    def mix(self) -> dict[str, float]: ...

    def estimated_pass_rate(self, task: Task) -> float: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def annotated(task: Task, note: str, *, before: bool, mark: str) -> Task:
    """``task`` with ``note`` written before or after its question (in its last user message, for chat prompts),
    a uid of its own and ``meta[mark]`` set, so that wrappers tell the tasks they derived from plain ones."""
    def add(text: str) -> str:
        return note + text if before else text + note

    messages = task.messages
    if messages:
        last = max(i for i, m in enumerate(messages) if m["role"] == "user")
        messages = tuple({**m, "content": add(m["content"])} if i == last else m for i, m in enumerate(messages))
    return replace(task, prompt=add(task.prompt), messages=messages, uid=f"{task.uid}#{mark}",
                   meta={**task.meta, mark: True})


class CurriculumWrapper:
    """A curriculum over another one, ``base``, whose draw shares and pass-rate estimates are the base's."""

    base: Curriculum

    def mix(self) -> dict[str, float]:
        return self.base.mix()

    def estimated_pass_rate(self, task: Task) -> float:
        return self.base.estimated_pass_rate(task)


Layer = TypeVar("Layer")


def find_layer(curriculum: Curriculum, kind: type[Layer]) -> Layer | None:
    """The layer of type ``kind`` in a chain of curriculum wrappers (each over its ``base``), if there is one."""
    while not isinstance(curriculum, kind):
        if not isinstance(curriculum, CurriculumWrapper):
            return None
        curriculum = curriculum.base
    return curriculum


class DerivedTaskQueue(CurriculumWrapper):
    """A curriculum over another one, ``base``, that serves ``fraction`` of each step's tasks from a queue of
    tasks it derived from observed groups (newest first: derived from the current policy's groups) and the
    rest from ``base``. The fraction of a draw that is not a whole task carries to the next draw, so a quarter
    of 6 tasks a step serves 1 and 2 in turn (rounding served 2, a third). Subclasses are dataclasses with these
    fields; ``observe`` fills the queue."""

    base: Curriculum
    fraction: float
    capacity: int
    queue: deque[Task]
    served: int
    carry: float = 0.0

    def __post_init__(self) -> None:
        self.queue = deque(self.queue, maxlen=self.capacity)

    def next_tasks(self, count: int) -> list[Task]:
        quota = self.fraction * count + self.carry
        whole = math.floor(quota + 1e-9)  # carries summed in floats may fall a hair short of a whole task
        self.carry = quota - whole if self.queue else 0.0  # none waiting: nothing owed
        take = min(len(self.queue), whole)
        derived = [self.queue.pop() for _ in range(take)]
        self.served += take
        return derived + self.base.next_tasks(count - take)

    def queue_state(self) -> dict[str, Any]:
        return {"base": self.base.state_dict(), "queue": list(self.queue), "served": self.served, "carry": self.carry}

    def load_queue_state(self, state: dict[str, Any]) -> None:
        self.base.load_state_dict(state["base"])
        self.queue = deque(state["queue"], maxlen=self.capacity)
        self.served, self.carry = state["served"], state.get("carry", 0.0)
