"""eva-style prompt selection (Ye et al. 2024, "Evolving Alignment via Asymmetric Self-Play").

A pool of concrete prompts, each scored by how informative its latest group of rewards was (by
default the gap between its best and worst sample, eva's regret proxy). Prompts are drawn with
min-max normalised scores as weights, so the solver practises where its samples disagree most.
The pool can grow: an evolver rewrites the ``top`` prompts and ``add``s the variants. The pool never
takes a task the run's ``HeldOut`` excludes (with TTRL's test-time set it is those very prompts).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from autotelic.curricula.bandit import arm_key
from autotelic.curricula.rngstate import rng_state, set_rng_state
from autotelic.heldout import HeldOut
from autotelic.types import Group, Task


def _gap(r: Sequence[float]) -> float:
    return max(r) - min(r)


def _regret(r: Sequence[float]) -> float:
    return max(r) - sum(r) / len(r)


def _variance(r: Sequence[float]) -> float:
    mean = sum(r) / len(r)
    return sum((x - mean) ** 2 for x in r) / len(r)


def _leave_one_out(r: Sequence[float]) -> float:
    total, n = sum(r), len(r)
    return sum(abs(x - (total - x) / (n - 1)) for x in r) / n


def _top2(r: Sequence[float]) -> float:
    best, second = sorted(r, reverse=True)[:2]
    return best - second


METRICS: dict[str, Callable[[Sequence[float]], float]] = {
    "gap": _gap,
    "regret": _regret,
    "variance": _variance,
    "loo": _leave_one_out,
    "top2": _top2,
}


def _metric(name: str) -> Callable[[Sequence[float]], float]:
    if name not in METRICS:
        raise ValueError(f"unknown informativeness metric '{name}'; choose one of {', '.join(METRICS)}")
    return METRICS[name]


def informativeness(rewards: Sequence[float], metric: str) -> float:
    """How much a group's rewards disagree; fewer than two rewards have nothing to compare: 0."""
    score = _metric(metric)
    return score(rewards) if len(rewards) >= 2 else 0.0


def informativeness_spread(scores: Sequence[float]) -> dict[str, float]:
    """How this step's informativeness is spread over the tasks observed, beside its mean: eva's regret needs
    graded rewards, and a 0/1 reward (a vote) makes it a disagreement flag, all 0 or 1: many zeros, two values."""
    if not scores:
        return {}
    return {"curriculum/informativeness_zero_share": sum(score == 0.0 for score in scores) / len(scores),
            "curriculum/informativeness_distinct": float(len({round(score, 6) for score in scores})),
            "curriculum/informativeness_max": max(scores)}


def minmax_weights(scores: Sequence[float]) -> list[float]:
    """Scores rescaled to [0, 1]; all equal (nothing to prefer) gives every one weight 1."""
    if not scores:
        return []
    low, high = min(scores), max(scores)
    if high == low:
        return [1.0] * len(scores)
    return [(s - low) / (high - low) for s in scores]


def sample_without_replacement(weights: Sequence[float], k: int, rng: random.Random) -> list[int]:
    """``min(k, len(weights))`` distinct indices, each draw proportional to weight among those left.

    Exponential race (Efraimidis-Spirakis): index i finishes at Exp(weights[i]) and the first k
    win, which is the same as drawing one at a time. Zero weights never finish, so they are taken
    (uniformly, by the tie-breaker) only once the positive weights run out.
    """
    if any(w < 0 for w in weights):
        raise ValueError(f"sampling weights must be non-negative, got {list(weights)}")
    keys = [(rng.expovariate(w) if w > 0 else math.inf, rng.random()) for w in weights]
    return sorted(range(len(weights)), key=keys.__getitem__)[:k]


@dataclass
class PoolEntry:
    task: Task
    score: float | None = None
    """Informativeness of the latest group; None until the task is first observed."""
    pass_rate: float | None = None
    """Mean reward of the latest group; None until the task is first observed."""


class EmptyPoolError(ValueError):
    pass


class PromptPoolCurriculum:
    """A Curriculum over a growing pool of concrete tasks, drawn by informativeness.

    ``gate``: (low, high) pass rates, inclusive; an observed task whose latest pass rate lies
    outside is not drawn (a learnability gate). ``prior``: the score of never-observed tasks;
    None means the current best score, so new prompts get tried.
    """

    def __init__(self, tasks: list[Task], heldout: HeldOut, seed: int, metric: str = "gap",
                 gate: tuple[float, float] | None = None, prior: float | None = None):
        _metric(metric)  # fail on a bad name now, not at the first observe
        self.heldout, self.metric, self.gate, self.prior = heldout, metric, gate, prior
        self.pool: dict[str, PoolEntry] = {}
        self.add(tasks)
        self.rng = random.Random(seed)

    def add(self, tasks: list[Task]) -> list[Task]:
        """Add tasks neither held out nor already in the pool (by uid), and return those; a known task keeps
        its scores."""
        added = [t for t in tasks if t.uid not in self.pool and not self.heldout.excludes(t)]
        for task in added:
            self.pool.setdefault(task.uid, PoolEntry(task))
        return added

    def _eligible(self, among: Callable[[Task], bool] | None = None) -> list[PoolEntry]:
        entries = [e for e in self.pool.values() if among is None or among(e.task)]
        if self.gate is None:
            return entries
        low, high = self.gate
        return [e for e in entries if e.pass_rate is None or low <= e.pass_rate <= high]

    def _weights(self, entries: list[PoolEntry]) -> list[float]:
        observed = [e.score for e in entries if e.score is not None]
        prior = self.prior if self.prior is not None else max(observed, default=0.0)
        return minmax_weights([e.score if e.score is not None else prior for e in entries])

    def next_tasks(self, count: int, among: Callable[[Task], bool] | None = None) -> list[Task]:
        """``count`` tasks drawn by informativeness, from the pool or from its tasks for which ``among`` holds."""
        eligible = self._eligible(among)
        if not eligible:
            why = (f"every observed pass rate lies outside the learnability gate {self.gate}" if self.pool
                   else "the pool is empty")
            raise EmptyPoolError(f"no eligible task in the prompt pool of {len(self.pool)}: {why}")
        weights = self._weights(eligible)
        picked: list[int] = []
        while len(picked) < count:  # repeats only once every eligible task has been drawn
            picked += sample_without_replacement(weights, count - len(picked), self.rng)
        return [eligible[i].task for i in picked]

    def observe(self, groups: list[Group]) -> dict[str, float]:
        """Score each pool task from its groups this step (a task drawn twice pools its samples)."""
        rewards: dict[str, list[float]] = {}
        for group in groups:
            if group.dropped_by != "reward_error" and group.samples and group.task.uid in self.pool:
                rewards.setdefault(group.task.uid, []).extend(group.rewards)
        scores = []
        for uid, task_rewards in rewards.items():
            entry = self.pool[uid]
            entry.score = informativeness(task_rewards, self.metric)
            entry.pass_rate = sum(task_rewards) / len(task_rewards)
            scores.append(entry.score)
        return {
            "curriculum/pool_size": float(len(self.pool)),
            "curriculum/eligible": float(len(self._eligible())),
            "curriculum/mean_informativeness": sum(scores) / len(scores) if scores else 0.0,
            **informativeness_spread(scores),
        }

    def top(self, k: int) -> list[Task]:
        """The k observed tasks with the highest latest informativeness (the evolver's seeds)."""
        observed = [e for e in self.pool.values() if e.score is not None]
        observed.sort(key=lambda e: e.score, reverse=True)
        return [e.task for e in observed[:k]]

    def estimated_pass_rate(self, task: Task) -> float:
        """The task's latest pass rate; 0.5 (most uncertain) before it is observed."""
        entry = self.pool.get(task.uid)
        return entry.pass_rate if entry is not None and entry.pass_rate is not None else 0.5

    def mix(self) -> dict[str, float]:
        """Each (family, level)'s share of the sampling weight over the eligible tasks."""
        eligible = self._eligible()
        shares: dict[str, float] = {}
        for entry, weight in zip(eligible, self._weights(eligible)):
            key = arm_key(entry.task.family, entry.task.level)
            shares[key] = shares.get(key, 0.0) + weight
        total = sum(shares.values())
        return {family: share / total for family, share in shares.items()}

    def state_dict(self) -> dict[str, Any]:
        return {
            "pool": [dataclasses.asdict(e.task) for e in self.pool.values()],
            "scores": [e.score for e in self.pool.values()],
            "pass_rates": [e.pass_rate for e in self.pool.values()],
            "rng": rng_state(self.rng),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        tasks = [Task(**fields) for fields in state["pool"]]
        self.pool = {
            task.uid: PoolEntry(task, score, pass_rate)
            for task, score, pass_rate in zip(tasks, state["scores"], state["pass_rates"])
        }
        set_rng_state(self.rng, state["rng"])
