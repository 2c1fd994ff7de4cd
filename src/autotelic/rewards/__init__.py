"""Reward functions: what turns a group's completions into numbers (the Filter stage's inputs).

A reward function scores a whole group at once, because some rewards (majority vote, judges
batching their calls) need the group. It returns nan for a sample it cannot score, such as a judge
reply without a score; the filter stage drops those groups as unscorable. The built-ins load on
demand (``REWARDS``, ``build_reward``) so that importing a verifier does not pull in sympy or a model.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from autotelic.registry import Registry
from autotelic.types import Group, Task

if TYPE_CHECKING:
    from autotelic.backends import PolicyBackend


class RewardFunction(Protocol):
    name: str

    def __call__(self, task: Task, completions: list[str]) -> list[float]: ...


class TrajectoryReward(Protocol):
    """A reward that reads whole samples (an episode's step facts) rather than reply texts: the web rewards.
    It says so with ``reads_trajectories = True``."""

    name: str
    reads_trajectories: bool

    def __call__(self, group: Group) -> list[float]: ...


# A reward is a class whose constructor arguments are its options; a model-backed reward's backend is passed
# separately. The built-ins are lazy references; a module may ``REWARDS.register("my_reward", MyReward)``, and an
# installed package announces its own under the ``autotelic.rewards`` entry-point group.
REWARDS: Registry[Callable[..., RewardFunction | TrajectoryReward]] = Registry("reward", {
    "verifier": "autotelic.rewards.verifiers:VerifierReward",
    "math_verify": "autotelic.rewards.math:MathVerifyReward",
    "majority_vote": "autotelic.rewards.majority:MajorityVoteReward",
    "format": "autotelic.rewards.checks:FormatReward",
    "length": "autotelic.rewards.checks:LengthPenalty",
    "judge": "autotelic.rewards.judge:LLMJudge",
    "self_certainty": "autotelic.rewards.confidence:SelfCertaintyReward",
    "unit_tests": "autotelic.rewards.unit_tests:UnitTestReward",
    "reward_model": "autotelic.rewards.reward_model:RewardModelReward",
    "process_value": "autotelic.rewards.process_value:ProcessValueReward",
    # web episodes (OpAgent's hybrid reward): these read the trajectory, not the reply text
    "web_success": "autotelic.rewards.web:WebSuccess",
    "web_progress": "autotelic.rewards.web:WebProgress",
    "web_judge": "autotelic.rewards.web:WebJudge",
})
# Constructor arguments that take Python objects (a backend, functions), not config values.
_NOT_OPTIONS = {"backend", "extract", "similarity"}
# Rewards that run a model: the judge grades with one, self-certainty reads the policy's distributions.
NEEDS_BACKEND = {"judge", "web_judge", "self_certainty"}
JUDGES = ("judge", "web_judge")
LABEL_FREE = frozenset({"majority_vote", "self_certainty", "judge", "reward_model", "process_value"})
"""Rewards that never read a task's reference answer: the guardrails check the answers they favour against it."""
SHAPING = frozenset({"format", "length"})
"""Rewards that read only a completion's form (a pattern, its length), to add to a reward that judges its content."""
JUDGE_MODEL = "base"
"""A judge's model unless its options name one: a frozen copy of the starting model, which cannot learn to please
itself as the policy would (``policy`` opts into self-judging; a directory names another model)."""


def is_custom(name: str) -> bool:
    """Whether a ``filter.rewards`` name points at a user's function (``module:fn`` or ``file.py:fn``)."""
    return ":" in name


def reward_names() -> list[str]:
    return sorted(REWARDS.names())


def build_reward(name: str, options: dict[str, Any] | None = None,
                 backend: PolicyBackend | None = None) -> RewardFunction:
    """The reward function called ``name``, configured from ``options`` (its constructor's arguments); a name with
    a colon is a user's function (``my_pkg.rewards:fn`` or ``file.py:fn``, see ``rewards/custom.py``)."""
    if is_custom(name):
        from autotelic.rewards.custom import CustomReward

        return CustomReward(name, dict(options or {}))
    cls = REWARDS.get(name)
    params = {k: p for k, p in inspect.signature(cls).parameters.items() if k not in _NOT_OPTIONS}
    options = dict(options or {})
    for key in options:
        if key not in params:
            valid = ", ".join(params) or "none"
            raise ValueError(f"unknown option '{key}' for reward '{name}'; valid options: {valid}")
    missing = [k for k, p in params.items() if p.default is inspect.Parameter.empty and k not in options]
    if missing:
        raise ValueError(f"reward '{name}' needs option '{missing[0]}'")
    if name in NEEDS_BACKEND:
        if backend is None:
            raise ValueError(f"reward '{name}' needs a model backend (a local model to score with)")
        options["backend"] = backend
    return cls(**options)
