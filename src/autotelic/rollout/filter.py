"""Filter: reward functions score samples, then group filters keep or drop whole groups.

Scoring is per group (majority vote and judges need the whole group). A reward that fails (raises, returns the
wrong number of rewards, a non-number, inf, or for a user's function nan) stops the run before the update with one
line naming the function, the task, the problem and the user's own frames (``UserCodeError``); with
``filter.on_reward_error=drop`` it drops only its group as ``reward_error``, with that line as a warning, until more
than ``filter.max_dropped_share`` of a step's groups are lost so (``RewardErrors``). A sample scored nan by a
built-in reward (a judge reply that does not parse: the model's output, not a defect) or None by a user's function
(TRL's "does not apply") drops its group as ``unscorable``.

Group filters: zero variance (no group-relative signal), ReST-GRPO's minimum reward std, a
learnability band on the pass rate, and ``select_top_variance`` over the whole batch (ReST-style
selection). Dynamic sampling, which refills the batch after filtering, lives in ``pipeline.py``.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections import Counter
from dataclasses import dataclass, field
from functools import singledispatch
from typing import Callable, Protocol, runtime_checkable

from autotelic.rewards.custom import RewardFunctionError
from autotelic.tasks import get_family
from autotelic.turn_credit import TurnCredit, credits_turns
from autotelic.types import Group, Sample, Task
from autotelic.user_code import UserCodeError, one_line, task_label, user_frames

log = logging.getLogger(__name__)

Scorer = Callable[[Group], list[float]]
"""Rewards for every sample of a group."""


def verifier_reward(task: Task, completion: str) -> float:
    """The task family's own verifier."""
    return get_family(task.family).score(task, task.full_response(completion))


def completion_scorer(reward_fn: Callable[[Task, list[str]], list[float]]) -> Scorer:
    """A Scorer from a reward function over (task, completions) (``autotelic.rewards``)."""

    def score(group: Group) -> list[float]:
        return list(reward_fn(group.task, [group.task.full_response(s.text) for s in group.samples]))

    score.__name__ = getattr(reward_fn, "name", getattr(reward_fn, "__name__", type(reward_fn).__name__))
    return score


@runtime_checkable
class ScoresTurns(Protocol):
    """A reward of multi-turn episodes that also says what each turn earned (the values sum to the reward)."""

    def __call__(self, group: Group) -> list[float]: ...

    def turns(self, group: Group) -> list[list[float]]: ...


class EnvReturn:
    """Episode mode: the environment's return, summed over the episode's steps; per turn, each step's reward."""

    name = "env"

    def __call__(self, group: Group) -> list[float]:
        return [float(s.info["return"]) for s in group.samples]

    def turns(self, group: Group) -> list[list[float]]:
        return [list(s.info.get("step_rewards", [])) for s in group.samples]


env_return = EnvReturn()


def record_turn_rewards(group: Group, parts: list[tuple[Scorer, float]], columns: list[list[float]]) -> None:
    """Each episode's weighted reward per turn, in ``info["turn_rewards"]`` (summing to its reward): a reward that
    scores turns gives its per-turn values where they add up to what it paid the episode (an episode's return can
    be set apart from its steps', as a proposer's executors are paid by vote), any other all of its value to the
    last turn."""
    per_part = [scorer.turns(group) if isinstance(scorer, ScoresTurns) else None for scorer, _ in parts]
    for index, sample in enumerate(group.samples):
        count = len(sample.info.get("turn_starts", ()))
        if not count:
            continue
        turns = [0.0] * count
        for (_, weight), column, values in zip(parts, columns, per_part):
            own = values[index] if values is not None else []
            if len(own) == count and math.isclose(weight * sum(own), column[index], abs_tol=1e-6):
                turns = [total + weight * value for total, value in zip(turns, own)]
            else:
                turns[-1] += column[index]
        sample.info["turn_rewards"] = turns


def weighted_scorer(parts: list[tuple[Scorer, float]]) -> Scorer:
    """Sum of weighted rewards; a nan in any part makes the sample nan. Episodes also get their rewards per turn
    (``record_turn_rewards``), for turn-level credit, a single outcome reward too (on their last turn)."""

    names = [getattr(scorer, "__name__", getattr(scorer, "name", "reward")) for scorer, _ in parts]

    def score(group: Group) -> list[float]:
        columns = [[weight * value for value in scorer(group)] for scorer, weight in parts]
        for name, column in zip(names, columns):
            if len(column) != len(group.samples):
                raise ValueError(f"{name} returned {len(column)} rewards for {len(group.samples)} samples")
        record_turn_rewards(group, parts, columns)
        return [sum(values) for values in zip(*columns)]

    score.__name__ = "+".join(names)
    return score


def scorer_name(scorer: Scorer) -> str:
    return getattr(scorer, "__name__", type(scorer).__name__)


@dataclass(frozen=True)
class RewardFailure:
    """What went wrong scoring a group: plain strings, so that it comes back whole from a reward worker."""

    function: str
    problem: str
    where: str = ""
    """The user's own frames (or their function's definition), empty where the failing code is ours."""

    def line(self, task: Task) -> str:
        return " ".join(filter(None, (f"reward function {self.function}", self.problem, "on", task_label(task),
                                      self.where)))


def group_rewards(scorer: Scorer, group: Group) -> list[float] | RewardFailure:
    """The scorer's rewards for the group, checked; or, when it fails, what went wrong."""
    name = scorer_name(scorer)
    try:
        values = [float(v) for v in scorer(group)]
    except RewardFunctionError as error:  # a user's function, named by itself within a sum of rewards
        return RewardFailure(error.function, error.problem, error.where)
    except Exception as error:
        return RewardFailure(name, f"raised {one_line(error)}", user_frames(error.__traceback__))
    if len(values) != len(group.samples):
        return RewardFailure(name, f"returned {len(values)} rewards for {len(group.samples)} completions")
    infinite = next((index for index, value in enumerate(values) if math.isinf(value)), None)
    if infinite is not None:
        return RewardFailure(name, f"returned {values[infinite]} for completion {infinite}")
    return values


@singledispatch
def score_all(scorer: Scorer, groups: list[Group]) -> list[list[float] | RewardFailure]:
    """Each group's rewards, or what went wrong (``group_rewards``), one group after another; a scorer spread
    over workers scores the whole list at once (``dist/rewards.py`` registers it)."""
    return [group_rewards(scorer, group) for group in groups]


@dataclass(frozen=True)
class RewardErrors:
    """What a failing reward does (``filter.on_reward_error``): stop the run, or drop its group (``drop``) while
    no more than ``max_dropped_share`` of a step's groups are lost so."""

    drop: bool = False
    max_dropped_share: float = 0.25

    def check_step(self, groups: list[Group], failures: list[str]) -> None:
        """Stops the run where more than the share of the step's groups were dropped for reward errors."""
        if failures and len(failures) > self.max_dropped_share * len(groups):
            raise UserCodeError(f"{len(failures)} of the step's {len(groups)} groups were dropped for reward errors, "
                                f"more than filter.max_dropped_share={self.max_dropped_share:g}; the first: "
                                f"{failures[0]}; fix the reward function")


def score_groups(groups: list[Group], scorer: Scorer, errors: RewardErrors = RewardErrors()) -> list[str]:
    """Fill every sample's reward; a nan one marks its group unscorable. A failing reward stops the run
    (UserCodeError) or, where ``errors.drop``, drops its group with a warning: returns those warnings' lines."""
    failures = []
    for group, values in zip(groups, score_all(scorer, groups)):
        if isinstance(values, RewardFailure):
            line = values.line(group.task)
            if not errors.drop:
                raise UserCodeError(f"{line}; fix it, or set filter.on_reward_error=drop to drop such groups")
            log.warning("%s; group dropped", line)
            failures.append(line)
            group.dropped_by = "reward_error"
            continue
        if any(math.isnan(v) for v in values):
            group.dropped_by = "unscorable"
        for sample, value in zip(group.samples, values):
            sample.reward = value
    return failures


def reward_std(group: Group) -> float:
    return statistics.pstdev(group.rewards) if len(group.samples) > 1 else 0.0


class GroupFilter(Protocol):
    name: str

    def keep(self, group: Group) -> bool: ...


@dataclass(frozen=True)
class ZeroVarianceFilter:
    """Groups whose rewards are all equal give every sample a zero advantage: no signal. With ``turn_credit``, a
    group of episodes credited per turn is kept where some turn's advantage is not zero (episodes that end alike
    but whose turns differ; with state groups, turns from one state whose returns differ), and only there."""

    turn_credit: TurnCredit | None = None
    name: str = "zero_variance"

    def keep(self, group: Group) -> bool:
        if self.turn_credit is not None and credits_turns(group):
            return any(abs(a) > 1e-8 for row in self.turn_credit.advantages(group, scale=False) for a in row)
        rewards = group.rewards
        return max(rewards) - min(rewards) > 1e-8


@dataclass(frozen=True)
class MinStdFilter:
    """ReST-GRPO: a group whose reward std is negligible teaches little even when not exactly zero."""

    min_std: float
    name: str = "low_std"

    def keep(self, group: Group) -> bool:
        return reward_std(group) >= self.min_std


@dataclass(frozen=True)
class PassRateBand:
    """Learnability gate: keep tasks the policy solves sometimes, neither never nor always."""

    low: float
    high: float
    name: str = "pass_rate_band"

    def keep(self, group: Group) -> bool:
        pass_rate = sum(group.rewards) / len(group.samples)
        return self.low <= pass_rate <= self.high


def select_top_variance(groups: list[Group], fraction: float) -> int:
    """ReST-style selection: of the kept groups, keep the ``fraction`` of highest reward std (at least
    one); the rest are dropped as ``low_value``. Returns how many were dropped."""
    kept = [g for g in groups if g.kept]
    if fraction >= 1.0 or not kept:
        return 0
    ranked = sorted(kept, key=reward_std, reverse=True)
    dropped = ranked[max(1, math.ceil(fraction * len(kept))):]
    for group in dropped:
        group.dropped_by = "low_value"
    return len(dropped)


@dataclass
class FilterStats:
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)

    def count(self, groups: list[Group]) -> None:
        for group in groups:
            if group.kept:
                self.kept += 1
            else:
                self.dropped[group.dropped_by] += 1

    def as_metrics(self) -> dict[str, float]:
        metrics = {"filter/kept_groups": float(self.kept)}
        metrics.update({f"filter/dropped_{name}": float(count) for name, count in self.dropped.items()})
        return metrics


def apply_filters(groups: list[Group], filters: list[GroupFilter]) -> None:
    """Mark dropped groups; the first filter to reject a group names the reason."""
    for group in groups:
        for group_filter in filters:
            if group.kept and not group_filter.keep(group):
                group.dropped_by = group_filter.name


def response_scorer(scorer: Scorer) -> Callable[[Task, list[str]], list[float]]:
    """A group Scorer as a function of (task, completions), for callers without sampled groups (tree search)."""

    def score(task: Task, completions: list[str]) -> list[float]:
        samples = [Sample(text=text, token_ids=[], logprobs=[], finished=True) for text in completions]
        return [float(v) for v in scorer(Group(task, [], samples))]

    return score
