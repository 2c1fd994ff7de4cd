"""Text environments: ``reset(task) -> observation``, ``step(action) -> (observation, reward, done, info)``.

A single-turn task is an environment with one turn. Observations come back to the policy as user
messages of its chat template, and the episode generator masks their tokens out of the loss. An
environment is a module exposing ``load_environment(**kwargs)``, found by name, entry point or dotted path
(``envs/registry.py``): ours are modules here, a user's live in their own package. The episode
generator resets and steps a batch of environments through ``call_all``, so environments in Ray actors
(``dist/envs.py``) work on their calls at the same time.

Two-player games for self-play (``generate.mode=selfplay``) are ``TwoPlayerGame``s instead: each player
reads its own observations, so one policy can play both roles with a transcript per role.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial, singledispatch
from typing import Any, Callable, NamedTuple, Protocol, runtime_checkable

from autotelic.tasks.textarena_games import TextArenaGame
from autotelic.types import Move, Task


class Step(NamedTuple):
    observation: str
    reward: float
    done: bool
    info: dict[str, Any]
    """Facts about the step for rewards and logs; ``info["state"]``, where given, names the state the step left
    (a hashable value), which turn credit by state groups (``algorithm.turn_baseline=state``) reads instead of the
    observation: an error or an unchanged page is an observation, not a state."""


@runtime_checkable
class Environment(Protocol):
    def reset(self, task: Task) -> str: ...

    def step(self, action: str) -> Step: ...

    def close(self) -> None:
        """Release what it holds (a browser, a server, an actor's slot) once its episode is over; most hold
        nothing, and do nothing."""
        ...


class TwoPlayerGame(Protocol):
    def reset(self, task: Task) -> None: ...

    @property
    def current_player(self) -> int: ...

    def observe(self, player: int) -> str:
        """The game's messages to ``player`` since it last observed: only what that player may see."""
        ...

    def step(self, action: str) -> Move:
        """The current player's move."""
        ...


@singledispatch
def start_call(env: Environment, method: str, argument: Any) -> Callable[[], Any]:
    """``env.method(argument)`` started: returns what waits for its result. An environment here runs the call
    when waited for; a remote one (``dist/envs.py`` registers it) starts it at once."""
    return partial(getattr(env, method), argument)


def call_all(calls: list[tuple[Environment, str, Any]]) -> list[Any]:
    """``env.method(argument)`` for each (env, method, argument), in order: every call starts before any is
    waited for, so remote environments step in parallel."""
    finishers = [start_call(env, method, argument) for env, method, argument in calls]
    return [finish() for finish in finishers]


class UnknownEnvironmentError(ValueError):
    pass


def make_env_factory(name: str, args: Mapping[str, Any] | None = None) -> Callable[[], Environment]:
    """A constructor for fresh environments of ``name`` (one per episode, so episodes share no state): a built-in
    one, an entry point or a module's dotted path, built with ``args`` (``envs/registry.py``)."""
    from autotelic.envs.registry import load_environment

    return load_environment(name, args).make_env


def make_game_factory(name: str) -> Callable[[], TwoPlayerGame]:
    """A constructor for fresh two-player games of ``name`` (self-play with a transcript per player)."""
    games: dict[str, Callable[[], TwoPlayerGame]] = {"textarena": TextArenaGame}  # the ta_* families
    if name not in games:
        raise UnknownEnvironmentError(f"unknown two-player game '{name}'; available: {', '.join(sorted(games))}")
    return games[name]
