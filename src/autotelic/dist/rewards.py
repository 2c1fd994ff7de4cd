"""Reward workers as Ray actors: scoring (verifiers, unit tests in each worker's sandbox, judge models)
spread over a pool, behind the Filter stage's ``score_all(scorer, groups)``.

Each actor builds the run's scorer from a picklable ``build`` (the trainer's ``build_scorer``), so a
judge model loads once per actor and model-written code runs in that actor's own sandboxes. A reward
that fails comes back as its ``RewardFailure`` (the function, the problem, the user's frames), which stops
the run or drops its group as in-process; a dead actor is replaced and its groups scored again.
"""

from __future__ import annotations

from typing import Any, Callable

from autotelic.dist.actors import ActorPool, PoolFront, split
from autotelic.rollout.filter import RewardFailure, score_all
from autotelic.types import Group
from autotelic.user_code import UserCodeError


class _RewardActor:
    role = "reward worker"

    def __init__(self, build: Callable[[int], Any], index: int) -> None:
        self.scorer = build(index)

    def score(self, groups: list[Group]) -> list[list[float] | RewardFailure]:
        return score_all(self.scorer, groups)  # the run's own scorer, in this actor: group by group


class RayRewardPool(PoolFront):
    __name__ = "reward workers"  # how a failure names this scorer where the workers themselves fail

    def __init__(self, build: Callable[[int], Any], workers: int, cpus_per_worker: float = 1.0,
                 gpus_per_worker: float = 0.0) -> None:
        self.pool = ActorPool(_RewardActor, build, workers, cpus_per_worker, gpus_per_worker)

    def __call__(self, group: Group) -> list[float]:
        """One group, as any Scorer (tree search scores its leaves one task at a time)."""
        (result,) = self.score_all([group])
        if isinstance(result, RewardFailure):
            raise UserCodeError(result.line(group.task))
        return result

    def score_all(self, groups: list[Group]) -> list[list[float] | RewardFailure]:
        shares = [([groups[j] for j in share],) for share in split(len(groups), len(self.pool.actors))]
        return [result for results in self.pool.map("score", shares) for result in results]


score_all.register(RayRewardPool, RayRewardPool.score_all)  # the whole batch at once, shared among the workers
