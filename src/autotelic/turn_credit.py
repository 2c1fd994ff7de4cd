"""Turn credit (``algorithm.turn_credit``): each turn of a multi-turn episode trained with its own advantage, from
the rewards its episode earned per turn (``rollout.filter.record_turn_rewards``), compared with every turn of its
group (``turn_baseline=group``) or, as GiGPO's step groups, with the turns its group took from the same state
(``turn_baseline=state``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass

from autotelic.algorithms import step_group_advantages, turn_advantages
from autotelic.config import AlgorithmConfig
from autotelic.types import Group, Sample


def credits_turns(group: Group) -> bool:
    """Whether every episode of the group has its rewards per turn (``rollout.filter.record_turn_rewards``)."""
    return all(len(s.info.get("turn_rewards", ())) == len(s.info.get("turn_starts", ())) > 0 for s in group.samples)


def turn_states(sample: Sample) -> list[Hashable]:
    """The environment state each turn of an episode was taken from: the start (one for every episode of a task,
    and a state of its own: a later turn back on the start page is not grouped with first turns) for the first
    turn, then the state the previous step left, the step's ``state`` where the environment names it (an
    observation such as "the page did not change" is not one), else its observation."""
    steps, observations = sample.info["steps"], sample.info.get("observations", [])
    return [None] + [steps[t]["state"] if "state" in steps[t] else observations[t]
                     for t in range(len(sample.info["turn_starts"]) - 1)]


@dataclass(frozen=True)
class TurnCredit:
    """``algorithm.turn_credit``'s settings: what each turn's return is compared with (``algorithm.turn_baseline``)."""

    baseline: str = "group"
    weight: float = 1.0
    discount: float = 0.95

    def advantages(self, group: Group, scale: bool) -> list[list[float]]:
        rewards = [s.info["turn_rewards"] for s in group.samples]
        starts = [s.info["turn_starts"] for s in group.samples]
        lengths = [len(s.token_ids) for s in group.samples]
        if self.baseline == "state":
            return step_group_advantages(rewards, starts, lengths, [turn_states(s) for s in group.samples], scale,
                                         self.weight, self.discount)
        return turn_advantages(rewards, starts, lengths, scale)


def later_turns_sharing_a_state(groups: list[Group]) -> float:
    """The share of turns after the first that another turn of their group was taken from the same state: those
    that turn_baseline=state ranks against a peer's (a turn from a state of its own has its episode's credit alone)."""
    shared = later = 0
    for group in filter(credits_turns, groups):
        states = [turn_states(s) for s in group.samples]
        counts = Counter(state for episode in states for state in episode)
        shared += sum(counts[state] > 1 for episode in states for state in episode[1:])
        later += sum(len(episode) - 1 for episode in states)
    return shared / later if later else 0.0


def turn_credit_of(algo: AlgorithmConfig) -> TurnCredit | None:
    return TurnCredit(algo.turn_baseline, algo.step_weight, algo.step_discount) if algo.turn_credit else None
