"""A process reward from a value model (ReST-RL's value model read as a PRM): the partial responses of each
answer (its first 1, 2, ... lines) are scored by a value model, trained without labels by ``autotelic value``
(tree search with test-scored rollouts), and the scores are aggregated into the answer's reward: ``min`` (a
solution is as good as its weakest step, as PRMs are read for best-of-n, Lightman et al. 2023), ``mean``, or
``last`` (the whole answer's value alone: an outcome reward model). Beside ``unit_tests`` in ``filter.rewards``
it grades answers whose tests tie, so a group all wrong or all right can still carry a signal (the GFCR survey's
process rewards in training). Scores are cached by (prompt, partial response): a group's answers share prefixes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from autotelic.rewards.cache import ScoreCache
from autotelic.types import Task

AGGREGATES = ("min", "mean", "last")


def step_prefixes(response: str, max_steps: int) -> list[str]:
    """The response cut after each of its non-empty lines (the last cut holds all of them); with more lines than
    ``max_steps``, ``max_steps`` cuts spread evenly, the last among them."""
    lines = response.splitlines(keepends=True)
    ends = [i + 1 for i, line in enumerate(lines) if line.strip()] or [len(lines)]
    if len(ends) > max_steps:
        ends = [ends[round((k + 1) * len(ends) / max_steps) - 1] for k in range(max_steps)]
    return ["".join(lines[:end]) for end in ends]


def process_scores(values: Callable[[list[tuple[str, str]]], list[float]], task: Task, completions: list[str],
                   aggregate: str = "min", max_steps: int = 8) -> list[float]:
    """Each completion's score from ``values`` (a value model's predictions for (prompt, partial response) pairs,
    in one call) over its steps, aggregated by ``aggregate`` (min, mean, or last: the whole answer only)."""
    cuts = [step_prefixes(task.full_response(c), max_steps) for c in completions]
    if aggregate == "last":
        cuts = [steps[-1:] for steps in cuts]
    scores = iter(values([(task.prompt, prefix) for steps in cuts for prefix in steps]))
    per_answer = [[next(scores) for _ in steps] for steps in cuts]
    if aggregate == "mean":
        return [sum(answer) / len(answer) for answer in per_answer]
    return [min(answer) for answer in per_answer]  # "last" has one value each


class ProcessValueReward:
    name = "process_value"

    def __init__(self, model: str, aggregate: Literal["min", "mean", "last"] = "min", max_steps: int = 8,
                 cache_size: int = 8192):
        from autotelic.value_model import ValueModel

        if aggregate not in AGGREGATES:
            raise ValueError(f"process_value option aggregate must be one of {', '.join(AGGREGATES)}, got "
                             f"{aggregate!r}")
        if max_steps < 1:
            raise ValueError(f"process_value option max_steps must be at least 1, got {max_steps}")
        self.value_model = ValueModel.load(model)
        self.aggregate, self.max_steps = aggregate, max_steps
        self.cache = ScoreCache(cache_size)

    def values(self, pairs: list[tuple[str, str]]) -> list[float]:
        return self.cache.scores(pairs, self.value_model.predict)

    def __call__(self, task: Task, completions: list[str]) -> list[float]:
        return process_scores(self.values, task, completions, self.aggregate, self.max_steps)
