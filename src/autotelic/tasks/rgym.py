"""Adapter from reasoning-gym's procedural datasets to our TaskFamily protocol.

reasoning-gym supplies the generator and the verifier (``score_answer``); we add a difficulty
knob by mapping ``level`` to the dataset's own size settings, and a one-line answer format so a
small model can be scored strictly. ``score`` is strict (1 only for a full-credit answer), as every
family's is; reasoning-gym's partial credit (e.g. the answer inside a longer number earns
len(answer)/len(reply)) is ``partial_score``, which only the verifier reward's ``partial_credit``
option pays, in training.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from autotelic.tasks import UnknownFamilyError, task_uid
from autotelic.tasks.numbers import FORMAT
from autotelic.text import first_integer
from autotelic.types import Task

# level -> dataset settings; datasets not listed use their defaults at every level
LEVEL_SETTINGS: dict[str, dict[int, dict[str, Any]]] = {
    "chain_sum": {
        1: dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1),
        2: dict(min_terms=3, max_terms=3, min_digits=1, max_digits=1),
        3: dict(min_terms=2, max_terms=2, min_digits=2, max_digits=2),
    },
    "leg_counting": {
        1: dict(min_animals=1, max_animals=1, max_instances=1),
        2: dict(min_animals=1, max_animals=1, max_instances=3),
        3: dict(min_animals=2, max_animals=2, max_instances=2),
    },
    "basic_arithmetic": {
        1: dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1),
        2: dict(min_terms=3, max_terms=3, min_digits=1, max_digits=1),
        3: dict(min_terms=2, max_terms=2, min_digits=2, max_digits=2),
    },
}


@dataclass
class ReasoningGymFamily:
    dataset: str
    levels: tuple[int, ...] = (1, 2, 3)
    integer_answers: bool = True
    _scorers: dict[int, Any] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return f"rg_{self.dataset}"

    def _settings(self, level: int) -> dict[str, Any]:
        return LEVEL_SETTINGS.get(self.dataset, {}).get(level, {})

    def _make(self, level: int, seed: int):
        import reasoning_gym

        return reasoning_gym.create_dataset(self.dataset, size=1, seed=seed, **self._settings(level))

    def generate(self, rng: random.Random, level: int) -> Task:
        if level not in self.levels:
            raise ValueError(f"family '{self.name}' has levels {self.levels}, not {level}")
        entry = self._make(level, rng.randrange(2**31))[0]
        question = entry["question"].strip()
        prompt = f"{question} {FORMAT}" if self.integer_answers else question
        meta = {"entry": {k: entry[k] for k in ("question", "answer", "metadata")}}
        return Task(prompt=prompt, answer=str(entry["answer"]), family=self.name, level=level,
                    uid=task_uid(self.name, prompt), meta=meta)

    def score(self, task: Task, completion: str) -> float:
        return float(self.partial_score(task, completion) >= 1.0)

    def partial_score(self, task: Task, completion: str) -> float:
        """reasoning-gym's own graded score in [0, 1]."""
        if task.level not in self._scorers:
            self._scorers[task.level] = self._make(task.level, 0)
        if self.integer_answers:
            number = first_integer(completion)
            if number is None:
                return 0.0
            completion = str(number)
        return float(self._scorers[task.level].score_answer(completion.strip(), task.meta["entry"]))


@lru_cache(maxsize=None)
def reasoning_gym_family(dataset: str) -> ReasoningGymFamily:
    import reasoning_gym

    if dataset not in reasoning_gym.factory.DATASETS:
        raise UnknownFamilyError(f"reasoning-gym has no dataset '{dataset}' (family 'rg_{dataset}')")
    sample = reasoning_gym.create_dataset(dataset, size=1, seed=0, **LEVEL_SETTINGS.get(dataset, {}).get(1, {}))[0]
    integer_answers = str(sample["answer"]).lstrip("-").isdigit()
    return ReasoningGymFamily(dataset, integer_answers=integer_answers)
