"""Held-out evaluation: greedy accuracy on a fixed task set the trainer never draws from."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from autotelic.backends import PolicyBackend
from autotelic.rollout.filter import verifier_reward
from autotelic.rollout.generate import PolicySampler
from autotelic.tasks import get_family
from autotelic.types import Task

DRAWS_PER_SLOT = 20


def heldout_tasks(families: list[str], levels: list[int], per_level: int, seed: int) -> list[Task]:
    """``per_level`` distinct tasks for every family and level, from a seed only evaluation uses."""
    tasks: list[Task] = []
    for name in families:
        family = get_family(name)
        for level in levels:
            if level not in family.levels:
                continue
            rng = random.Random(f"{seed}/{name}/{level}")
            seen: dict[str, Task] = {}
            for _ in range(per_level * DRAWS_PER_SLOT):
                task = family.generate(rng, level)
                seen.setdefault(task.uid, task)
                if len(seen) == per_level:
                    break
            tasks.extend(seen.values())
    return tasks


@dataclass
class EvalResult:
    accuracy: float
    by_family: dict[str, float]
    by_level: dict[str, float]
    records: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"accuracy": self.accuracy, "by_family": self.by_family, "by_level": self.by_level}


def _mean_by(records: list[dict[str, Any]], key: str) -> dict[str, float]:
    buckets: dict[str, list[float]] = defaultdict(list)
    for record in records:
        buckets[str(record[key])].append(record["reward"])
    return {name: sum(v) / len(v) for name, v in sorted(buckets.items())}


def evaluate(policy: PolicyBackend, tasks: list[Task], max_new_tokens: int, batch_size: int = 64) -> EvalResult:
    """Greedy decoding, one sample per task, scored by each family's verifier."""
    sampler = PolicySampler(policy, greedy=True)
    records = []
    for start in range(0, len(tasks), batch_size):
        for group in sampler.generate(tasks[start:start + batch_size], 1, max_new_tokens):
            completion = group.samples[0].text
            records.append({"family": group.task.family, "level": group.task.level, "prompt": group.task.prompt,
                            "answer": group.task.answer, "completion": completion,
                            "reward": verifier_reward(group.task, completion)})
    accuracy = sum(r["reward"] for r in records) / max(1, len(records))
    return EvalResult(accuracy, _mean_by(records, "family"), _mean_by(records, "level"), records)
