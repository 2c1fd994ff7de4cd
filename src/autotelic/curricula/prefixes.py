"""ReST-GRPO's partial-solution prompts (ReST-RL, Zhoubian et al. 2025).

When the solver answers a problem (nearly) fully correctly, its group usually has little reward
spread and teaches GRPO nothing. Cutting that answer into line prefixes and asking the solver to
continue from one turns the problem into new prompts of intermediate difficulty, whose groups do
vary. Later cut points are preferred (weight ``decay**lines_from_the_end``), as in the paper: a
long correct prefix leaves a short, learnable remainder.

``PrefixCurriculum`` wraps any curriculum: it harvests correct answers from the groups it
observes and serves a share of each step's tasks from the prefixes it made.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from autotelic.curricula.base import Curriculum, DerivedTaskQueue
from autotelic.curricula.regret import sample_without_replacement
from autotelic.curricula.rngstate import rng_state, set_rng_state
from autotelic.types import Group, Task

_FENCE = "```"


def line_prefixes(response: str) -> list[str]:
    """The response cut just before the first non-blank character of each code line but the first:
    inside the first fenced code block when there is one (prose before it stays in every prefix), else
    over all lines. The cut keeps the line's indentation, so the continuation starts on a token boundary
    the model itself would use ("\n    " is one token for most code tokenizers; a prefix ending at
    "\n" invites a spurious fence or a one-space indent)."""
    lines = response.splitlines(keepends=True)
    fences = [i for i, line in enumerate(lines) if line.lstrip().startswith(_FENCE)]
    first, last = (fences[0] + 1, fences[1] if len(fences) > 1 else len(lines)) if fences else (0, len(lines))
    code_lines = [i for i in range(first, last) if lines[i].strip()]
    return ["".join(lines[:i]) + lines[i][:len(lines[i]) - len(lines[i].lstrip())] for i in code_lines[1:]]


def choose_prefixes(prefixes: list[str], count: int, decay: float, rng: random.Random) -> list[str]:
    """Up to ``count`` distinct prefixes, drawn with weight decay**(lines left after the cut)."""
    weights = [decay ** (len(prefixes) - 1 - i) for i in range(len(prefixes))]
    return [prefixes[i] for i in sorted(sample_without_replacement(weights, min(count, len(prefixes)), rng))]


def prefix_task(task: Task, prefix: str) -> Task:
    return replace(task, uid=f"{task.uid}#prefix{len(prefix)}", response_prefix=prefix)


@dataclass
class PrefixCurriculum(DerivedTaskQueue):
    base: Curriculum
    fraction: float = 0.25
    """Share of each step's tasks served from partial-solution prompts (when any are queued)."""
    per_solution: int = 2
    decay: float = 0.95
    min_reward: float = 1.0
    """An answer counts as correct, and is cut into prefixes, at this reward or above."""
    capacity: int = 256
    """Prefixes kept waiting at most; the oldest are forgotten first."""
    seed: int = 0
    queue: deque[Task] = field(default_factory=deque)
    served: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        self.rng = random.Random(f"prefixes/{self.seed}")

    def observe(self, groups: list[Group]) -> dict[str, float]:
        original = [g for g in groups if not g.task.response_prefix]
        metrics = self.base.observe(original)
        made = 0
        for group in original:
            best = max(group.samples, key=lambda s: s.reward if s.reward is not None else float("-inf"))
            if best.reward is None or best.reward < self.min_reward:
                continue
            chosen = choose_prefixes(line_prefixes(best.text), self.per_solution, self.decay, self.rng)
            self.queue.extend(prefix_task(group.task, prefix) for prefix in chosen)
            made += len(chosen)
        prefixed = [g for g in groups if g.task.response_prefix]
        rewards = [r for g in prefixed for r in g.rewards]
        metrics.update({"prefix/made": float(made), "prefix/queued": float(len(self.queue)),
                        "prefix/served_total": float(self.served)})
        if rewards:
            metrics["prefix/reward_mean"] = sum(rewards) / len(rewards)
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {**self.queue_state(), "rng": rng_state(self.rng)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_queue_state(state)
        set_rng_state(self.rng, state["rng"])
