"""New tasks from the agent's failures (WebRL's self-evolving curriculum), with checks derived, not guessed.

WebRL has an LLM write new instructions from the tasks the agent failed. Here a failure is cut at its
frontier instead: when no sample of a group succeeds, the first progress milestone that no sample
reached becomes the success check of a new, shorter task — the parent's start page, its milestones up to
that one as the instruction ("open the page of the Blue Mug, then add the Blue Mug to the cart") and the
earlier milestones as its progress. The check is the parent's own condition, so it is exact. A derived
task that fails in turn is cut again, down to a single milestone.

``FailureCurriculum`` wraps any curriculum and serves ``fraction`` of each step's tasks from the
derived ones waiting (newest first: the current policy's failures). A cut can be a held-out task itself
("Open the page of the Blue Mug." is a level-1 shop task): such cuts are never queued.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from autotelic.curricula.base import Curriculum, DerivedTaskQueue
from autotelic.heldout import HeldOut
from autotelic.rewards.web import succeeded
from autotelic.types import Group, Task


def frontier(group: Group) -> int:
    """The first progress milestone no sample of the group reached (web episodes' step facts)."""
    reached = {i for s in group.samples if s.info.get("steps") for i in s.info["steps"][-1].get("reached", [])}
    return next(i for i in range(len(reached) + 1) if i not in reached)


def failed(group: Group) -> bool:
    return not any(map(succeeded, group.samples))


def frontier_task(task: Task, cut: int) -> Task | None:
    """The task cut at milestone ``cut``: its goals up to that one as the instruction, that milestone as
    the success check; None when there is no such milestone or one up to it has no goal."""
    progress = task.meta.get("progress", [])
    goals = [m.get("goal") for m in progress[:cut + 1]]
    if cut >= len(progress) or not all(goals):
        return None
    prompt = ", then ".join(goals)
    prompt = prompt[0].upper() + prompt[1:] + "."
    meta = {**task.meta, "success": [progress[cut]], "progress": progress[:cut], "parent": task.uid}
    return replace(task, prompt=prompt, answer="", uid=f"{task.family}:{prompt}", meta=meta)


@dataclass
class FailureCurriculum(DerivedTaskQueue):
    base: Curriculum
    heldout: HeldOut
    fraction: float = 0.25
    """Share of each step's tasks served from derived tasks (when any are waiting)."""
    capacity: int = 128
    queue: deque[Task] = field(default_factory=deque)
    made: int = 0
    served: int = 0

    def observe(self, groups: list[Group]) -> dict[str, float]:
        metrics = self.base.observe([g for g in groups if "parent" not in g.task.meta])
        waiting = {t.uid for t in self.queue}
        for group in groups:
            child = frontier_task(group.task, frontier(group)) if failed(group) else None
            if (child is not None and child.uid not in waiting and child.uid != group.task.uid
                    and not self.heldout.excludes(child)):
                self.queue.append(child)
                waiting.add(child.uid)
                self.made += 1
        derived = [g for g in groups if "parent" in g.task.meta]
        metrics.update({"failures/made_total": float(self.made), "failures/queued": float(len(self.queue)),
                        "failures/served_total": float(self.served)})
        if derived:
            metrics["failures/derived_success"] = sum(not failed(g) for g in derived) / len(derived)
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {**self.queue_state(), "made": self.made}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_queue_state(state)
        self.made = state["made"]
