"""Guided rollouts (the GFCR survey's externally guided generation; question augmentation with partial
solutions, as QuestA): a task the policy failed on comes back with a hint, the start of its reference solution,
written into the question, so a problem it cannot yet solve still yields groups whose rewards differ.

The reference is a column of the task's data (``column``, e.g. a dataset's worked solution). A group whose
best reward is at most ``max_reward`` is queued again with the first ``share`` of the reference: its lines
when it has several, else its words. ``fraction`` of each step's tasks come from that queue, a share that
decays by ``decay`` every step: guidance is scaffolding for the early steps, and training ends on unguided
rollouts. The hint is part of the prompt, never trained on, and the response is the policy's own, scored as
any other (a hint in the response would put its numbers before the answer a first-number check reads); the
base curriculum observes only the unhinted groups.

``mode="demonstration"`` guides from outside the policy's samples instead (LUFFY's off-policy guidance, for
what the policy never samples, such as a web agent's ``answer`` or the bare number a strict verifier asks for):
the failed task comes back unchanged, and one sample of its group is the whole reference (``PolicySampler``), or
in episodes plays it, one action (line) a turn, in place of sampled turns (``EpisodeSampler``). It is trained
like the policy's own samples, from its log-probs under the policy, so the group's rewards differ and the
demonstration gets the advantage it earned.

A partial-solution prompt (ReST-GRPO's, ``curricula/prefixes.py``) is never guided: its reply continues the cut,
which the reference, written from the start, does not.

``stuck_window`` keeps guidance for the families the policy never solves: a task is guided only while none of
its family's last ``stuck_window`` unguided groups was solved. Once the policy's own samples sometimes succeed,
its groups already differ, and a reference in place of a sample would only pull the family off-policy.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from autotelic.curricula.base import Curriculum, DerivedTaskQueue, annotated
from autotelic.types import Group, Task


def hint_of(reference: str, share: float) -> str:
    """The first ``share`` of ``reference``: whole lines when it has several, else words; never all of it."""
    lines = reference.strip().splitlines(keepends=True)
    if len(lines) > 1:
        return "".join(lines[:min(len(lines) - 1, math.ceil(share * len(lines)))])
    words = reference.split()
    kept = min(len(words) - 1, math.ceil(share * len(words)))
    return " ".join(words[:kept]) + " " if kept > 0 else ""


def hinted(task: Task, hint: str) -> Task:
    """``task`` with ``hint`` after its question (in its last user message, for chat prompts)."""
    return annotated(task, f"\n\nHint: a solution starts like this:\n{hint.rstrip()}", before=False, mark="hinted")


def demonstrated(task: Task, reference: str) -> Task:
    """``task`` as it was, with ``reference`` (one action a line) for one episode of its group to play. Only blank
    lines around it are dropped: a code reference's first line keeps its indentation."""
    lines = reference.rstrip().splitlines()
    while lines and not lines[0].strip():
        lines.pop(0)
    return replace(task, uid=f"{task.uid}#demonstrated", meta={**task.meta, "hinted": True, "demonstration": lines})


def reference_of(task: Task, column: str) -> str | None:
    value = task.answer if column == "answer" else task.meta.get("columns", {}).get(column)
    return value if isinstance(value, str) and value.strip() else None


@dataclass
class HintCurriculum(DerivedTaskQueue):
    base: Curriculum
    column: str = "solution"
    fraction: float = 0.25
    """The current share of each step's tasks served with hints (it decays)."""
    share: float = 0.5
    decay: float = 0.9
    max_reward: float = 0.0
    mode: str = "prompt"
    """"prompt": the hint is written into the question; "demonstration": one episode plays the reference."""
    stuck_window: int = 0
    """0: any failed task is guided; N: only while none of its family's last N unguided groups was solved."""
    capacity: int = 256
    queue: deque[Task] = field(default_factory=deque)
    served: int = 0
    solved: dict[str, deque[bool]] = field(default_factory=dict)
    """Per family, whether each of its last ``stuck_window`` unguided groups was solved (newest last)."""

    def observe(self, groups: list[Group]) -> dict[str, float]:
        original = [g for g in groups if not g.task.meta.get("hinted")]
        metrics = self.base.observe(original)
        if self.stuck_window:
            self._remember(original)
            metrics["hint/stuck_families"] = float(sum(not any(flags) for flags in self.solved.values()))
        made = 0
        for group in original:
            reference = reference_of(group.task, self.column)
            # a partial-solution prompt (curricula/prefixes.py) continues its cut: a reference answers from the start
            if (reference is None or group.task.meta.get("partial_solution") or not group.samples
                    or max(group.rewards) > self.max_reward or not self._stuck(group.task.family)):
                continue
            retry = self._retry(group.task, reference)
            if retry is not None:
                self.queue.append(retry)
                made += 1
        guided = [(s, r) for g in groups if g.task.meta.get("hinted") for s, r in zip(g.samples, g.rewards)]
        own = [r for s, r in guided if not s.info.get("demonstration")]
        played = [r for s, r in guided if s.info.get("demonstration")]
        metrics.update({"hint/made": float(made), "hint/queued": float(len(self.queue)),
                        "hint/fraction": self.fraction, "hint/served_total": float(self.served)})
        if own:
            metrics["hint/reward_mean"] = sum(own) / len(own)
        if played:  # below the full reward: the references do not solve their tasks as written
            metrics["hint/demonstration_reward"] = sum(played) / len(played)
        self.fraction *= self.decay
        return metrics

    def _remember(self, groups: list[Group]) -> None:
        """Record which groups were solved, and drop the queued retries of families that no longer need them."""
        for group in groups:
            if group.samples:
                flags = self.solved.setdefault(group.task.family, deque(maxlen=self.stuck_window))
                flags.append(max(group.rewards) > self.max_reward)
        self.queue = deque((task for task in self.queue if self._stuck(task.family)), maxlen=self.capacity)

    def _stuck(self, family: str) -> bool:
        return not self.stuck_window or not any(self.solved.get(family, ()))

    def _retry(self, task: Task, reference: str) -> Task | None:
        """The failed task again, with its reference to play or the start of it as a hint (none if too short)."""
        if self.mode == "demonstration":
            return demonstrated(task, reference)
        hint = hint_of(reference, self.share)
        return hinted(task, hint) if hint else None

    def state_dict(self) -> dict[str, Any]:
        return {**self.queue_state(), "fraction": self.fraction,
                "solved": {family: list(flags) for family, flags in self.solved.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_queue_state(state)
        self.fraction = state["fraction"]
        # checkpoints written before stuck_window carry no record: every family then starts stuck, as a new run
        self.solved = {family: deque(flags, maxlen=self.stuck_window)
                       for family, flags in state.get("solved", {}).items()}
