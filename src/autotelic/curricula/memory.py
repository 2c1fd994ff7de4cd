"""Memory replay (the GFCR survey's skill/memory replay; in-context experience as ExpeL and Buffer of Thoughts):
problems the policy solved earlier, with its own solving answer, are retrieved into the prompts of later,
similar problems as worked examples.

Every observed group whose best reward reaches ``min_reward`` puts (question, best answer) in a bank of the
``capacity`` newest entries (a question already there is refreshed, not repeated). Of each step's tasks,
``fraction`` are served with the ``examples`` entries whose questions are most similar to theirs (cosine of
word counts; the task's own question is never its example) written before the question. The answers are the
policy's own, never a reference, so no label enters a prompt; held-out tasks never train, so none is banked.
The examples are prompt, never trained on; the base curriculum observes only the plain groups. Metrics:
``memory/*`` (bank size, tasks served, the mean reward of served and of plain groups this step).

With ``at_eval`` the trained run is also evaluated as a deployed agent keeping this memory would be: each held-out
question served with its nearest banked training problems (``recall``), beside the weights-only accuracy. With
``fraction`` 0 the memory only banks, so training is exactly the run's without memory (Agent Workflow Memory's
setting: experience kept for deployment). An episode is remembered as the actions its environment read.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any

from autotelic.curricula.base import Curriculum, CurriculumWrapper, annotated
from autotelic.curricula.rngstate import rng_state, set_rng_state
from autotelic.types import Group, Sample, Task

_WORD = re.compile(r"[a-z]+|\d+|[^\sa-z\d]", re.IGNORECASE)


def bag_of_words(text: str) -> Counter[str]:
    return Counter(word.lower() for word in _WORD.findall(text))


def cosine(a: Counter[str], b: Counter[str]) -> float:
    dot = sum(count * b[word] for word, count in a.items())
    return dot / math.sqrt(sum(c * c for c in a.values()) * sum(c * c for c in b.values()) or 1.0)


def remembered(task: Task, sample: Sample) -> str:
    """What the memory keeps of a solving sample: an episode's actions as the environment read them (its
    canonical form, one a line: the policy's turns around them may ramble), else the whole reply."""
    actions = [step["action"] for step in sample.info.get("steps", []) if step.get("action")]
    if actions:
        return "\n".join(task.full_response(" " + action) for action in actions)
    return task.full_response(sample.text).strip()


def with_examples(task: Task, examples: list[tuple[str, str]]) -> Task:
    """``task`` with ``examples`` ((question, answer) pairs) written before its question."""
    shown = "\n\n".join(f"Problem: {question}\nYour solution: {answer}" for question, answer in examples)
    return annotated(task, f"Problems you solved before:\n\n{shown}\n\nNow this problem:\n", before=True,
                     mark="memory")


@dataclass
class MemoryCurriculum(CurriculumWrapper):
    base: Curriculum
    fraction: float = 0.5
    examples: int = 2
    min_reward: float = 1.0
    capacity: int = 256
    max_chars: int = 400
    """An answer longer than this is cut to its first ``max_chars`` characters."""
    seed: int = 0
    bank: OrderedDict[str, str] = field(default_factory=OrderedDict)
    """Question -> the policy's best answer to it, oldest first."""
    served: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def next_tasks(self, count: int) -> list[Task]:
        tasks = self.base.next_tasks(count)
        if not self.bank:
            return tasks
        chosen = set(self.rng.sample(range(len(tasks)), round(self.fraction * len(tasks))))
        if not chosen:  # fraction 0 (a memory kept for evaluation): nothing to recall, no bank to read each step
            return tasks
        recalled = self.recall([task for index, task in enumerate(tasks) if index in chosen])
        self.served += sum(task.meta.get("memory", False) for task in recalled)
        served = iter(recalled)
        return [next(served) if index in chosen else task for index, task in enumerate(tasks)]

    def recall(self, tasks: list[Task]) -> list[Task]:
        """Each task with its ``examples`` most similar banked problems written before it (unchanged when the
        bank holds none but itself)."""
        words = {question: bag_of_words(question) for question in self.bank}
        recalled = []
        for task in tasks:
            own = bag_of_words(task.prompt)
            nearest = sorted((q for q in self.bank if q != task.prompt), key=lambda q: -cosine(own, words[q]))
            recalled.append(with_examples(task, [(q, self.bank[q]) for q in nearest[:self.examples]])
                            if nearest else task)
        return recalled

    def observe(self, groups: list[Group]) -> dict[str, float]:
        plain = [g for g in groups if not g.task.meta.get("memory")]
        metrics = self.base.observe(plain)
        for group in plain:
            if not group.samples or max(group.rewards) < self.min_reward:
                continue
            best = max(group.samples, key=lambda s: s.reward or 0.0)
            self.bank.pop(group.task.prompt, None)
            self.bank[group.task.prompt] = remembered(group.task, best)[:self.max_chars]
            while len(self.bank) > self.capacity:
                self.bank.popitem(last=False)
        metrics.update({"memory/size": float(len(self.bank)), "memory/served_total": float(self.served)})
        for name, part in (("served", [g for g in groups if g.task.meta.get("memory")]), ("plain", plain)):
            rewards = [r for g in part for r in g.rewards]
            if rewards:
                metrics[f"memory/{name}_reward_mean"] = sum(rewards) / len(rewards)
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {"base": self.base.state_dict(), "bank": list(self.bank.items()), "served": self.served,
                "rng": rng_state(self.rng)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.base.load_state_dict(state["base"])
        self.bank = OrderedDict(state["bank"])
        self.served = state["served"]
        set_rng_state(self.rng, state["rng"])
