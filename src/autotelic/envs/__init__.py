"""Text environments: ``reset(task) -> observation``, ``step(action) -> (observation, reward, done, info)``.

A single-turn task is an environment with one turn. Observations come back to the policy as user
messages of its chat template, and the episode generator masks their tokens out of the loss. A new
environment is one module here plus a line in ``ENVIRONMENTS``.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Protocol

from autotelic.types import Task


class Step(NamedTuple):
    observation: str
    reward: float
    done: bool
    info: dict[str, Any]


class Environment(Protocol):
    def reset(self, task: Task) -> str: ...

    def step(self, action: str) -> Step: ...


class UnknownEnvironmentError(ValueError):
    pass


def make_env_factory(name: str) -> Callable[[], Environment]:
    """A constructor for fresh environments of ``name`` (one per episode, so episodes share no state)."""
    from autotelic.envs.guess_number import GuessNumberEnv
    from autotelic.envs.textarena_games import TextArenaSelfPlayEnv
    from autotelic.envs.tools import calculator_env, python_env

    environments: dict[str, Callable[[], Environment]] = {
        "guess_number": GuessNumberEnv,
        "calculator": calculator_env,  # tool use on arithmetic families (add, rg_chain_sum, ...)
        "python": python_env,
        "textarena": TextArenaSelfPlayEnv,  # self-play on the ta_* families
    }
    if name not in environments:
        raise UnknownEnvironmentError(f"unknown environment '{name}'; available: {', '.join(sorted(environments))}")
    return environments[name]
