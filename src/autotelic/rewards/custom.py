"""Your own reward function, named in ``filter.rewards`` by ``my_pkg.rewards:fn`` (a module on PYTHONPATH or
installed) or ``path/to/file.py:fn``; a reward written for TRL's GRPOTrainer works unchanged.

It is called once per group, TRL's way: ``fn(prompts=[...], completions=[...], completion_ids=[...], **columns)``,
one entry per sample. ``prompts`` and ``completions`` are text, or chat messages where the task's prompt is chat
messages (a data row's list): then each prompt is its message list and each completion
``[{"role": "assistant", "content": text}]``. ``columns`` are the task's data columns (``answer``, ``tests``,
``level`` and any other column of the row; built-in families give ``answer``), each repeated per sample. A function
without ``**kwargs`` gets only the arguments it names. The reward's ``options`` are passed as keyword arguments
too. TRL's trainer-only arguments (``trainer_state``, ``log_extra``, ``log_metric``, ``environments``) are not
passed. ``async def`` functions are run to completion.

It returns one number per completion, or None for a sample it does not score (TRL's meaning: the function does not
apply to it): None becomes nan and, as for any reward, its group is dropped as ``unscorable`` (a group-relative
advantage needs every sample scored; TRL instead sums the other functions' rewards). Anything else is a defect in
the function: raising, returning the wrong number of rewards, a value that is not a number (a str), nan or inf
raises ``RewardFunctionError`` naming the function, the problem and where in the user's file; the Filter stage
(``rollout/filter.py``) stops the run on it before the update, or drops the group (``filter.on_reward_error``).
"""

from __future__ import annotations

import asyncio
import inspect
import math
from dataclasses import dataclass, field
from collections.abc import Iterable, Mapping
from typing import Any, Callable

from autotelic.registry import ModuleFileNotFoundError, import_user_module
from autotelic.rewards import is_custom
from autotelic.types import Group
from autotelic.user_code import UserCodeError, as_number, defined_at, one_line, user_frames

FIX = "put its module on PYTHONPATH (or pip install it), or name a file as path/to/file.py:fn"


class RewardLoadError(ValueError):
    """A reward function that cannot be found or is not callable; the message is one line with the fix."""


# Functions handed over from Python (``autotelic.train(reward_funcs=[fn])``), by the name the run records for each.
PASSED: dict[str, Callable[..., Any]] = {}


def pass_function(function: Callable[..., Any]) -> str:
    """The name a function passed from Python goes by in ``filter.rewards``: ``module:qualified_name``, made
    unique in this process (``#2``...) when another function already holds it (two lambdas)."""
    base = f"{function.__module__}:{function.__qualname__}"
    name, count = base, 1
    while PASSED.get(name, function) is not function:
        count += 1
        name = f"{base}#{count}"
    PASSED[name] = function
    return name


def load_function(name: str) -> Callable[..., Any]:
    """The function ``name`` points at; RewardLoadError naming what is wrong and the fix."""
    if name in PASSED:
        return PASSED[name]
    where, _, attribute = name.rpartition(":")
    if where == "__main__" or "<" in attribute or "#" in attribute:
        raise RewardLoadError(f"reward '{name}' was a function passed from Python, which this process cannot "
                              "import: pass it again (autotelic.resume(run_dir, reward_funcs=[...])), or define it "
                              "in a module and name it my_pkg.rewards:fn")
    if not where or not attribute:
        raise RewardLoadError(f"reward '{name}' must look like my_pkg.rewards:fn or path/to/file.py:fn")
    try:
        module = import_user_module(where)
    except ModuleFileNotFoundError:
        raise RewardLoadError(f"reward '{name}': file {where} not found") from None
    except Exception as error:  # ModuleNotFoundError, or whatever the user's module raises while importing
        problem = " ".join(f"{type(error).__name__}: {error}".split())
        raise RewardLoadError(f"reward '{name}': cannot import {where} ({problem}); {FIX}") from None
    function = getattr(module, attribute, None)
    if function is None:
        raise RewardLoadError(f"reward '{name}': {where} has no '{attribute}'")
    if not callable(function):
        raise RewardLoadError(f"reward '{name}': {where}.{attribute} is a {type(function).__name__}, not a function")
    return function


def reward_problems(names: list[str]) -> list[str]:
    """``filter.rewards`` entries naming a user's function that does not load, each in one line."""
    problems = []
    for index, name in enumerate(names):
        if is_custom(name):
            try:
                load_function(name)
            except RewardLoadError as error:
                problems.append(f"filter.rewards[{index}]: {error}")
    return problems


class RewardFunctionError(UserCodeError):
    """A user's reward function raised, or returned something other than a number or None per completion."""

    def __init__(self, function: str, problem: str, where: str) -> None:
        super().__init__(" ".join(filter(None, (f"reward function {function}", problem, where))))
        self.function, self.problem, self.where = function, problem, where


class MalformedRewards(ValueError):
    """What a reward function returned is not one number or None per completion."""


def checked_rewards(values: Any, count: int) -> list[float]:
    """A reward function's return for ``count`` completions as numbers (None: nan); MalformedRewards for anything
    else, and for nan or inf, which no reward means."""
    try:
        if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
            raise TypeError
        values = list(values)
    except TypeError:  # iterating a 0-d array raises it too
        raise MalformedRewards(f"returned a {type(values).__name__} ({values!r:.40}), not a list of one reward per "
                               "completion") from None
    if len(values) != count:
        raise MalformedRewards(f"returned {len(values)} rewards for {count} completions")
    rewards = []
    for index, value in enumerate(values):
        number = math.nan if value is None else as_number(value)
        if number is None:
            raise MalformedRewards(f"returned a {type(value).__name__} ({value!r:.40}) for completion {index}")
        if value is not None and not math.isfinite(number):
            raise MalformedRewards(f"returned {number} for completion {index}")
        rewards.append(number)
    return rewards


@dataclass
class CustomReward:
    """A TRL-style reward function over a whole group (it reads samples: their token ids and the task)."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    reads_trajectories: bool = field(default=True, init=False)

    def __post_init__(self) -> None:
        self.function = load_function(self.name)
        self.__name__ = self.name  # how filter warnings and summed rewards name it
        parameters = inspect.signature(self.function).parameters.values()
        self.takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
        self.accepted = {p.name for p in parameters}

    def arguments(self, group: Group) -> dict[str, Any]:
        task, count = group.task, len(group.samples)
        texts = [task.full_response(sample.text) for sample in group.samples]
        chat = task.messages is not None
        columns = {"answer": task.answer, **task.meta.get("columns", {})}
        arguments = {
            "prompts": [task.chat] * count,
            "completions": [[{"role": "assistant", "content": text}] for text in texts] if chat else texts,
            "completion_ids": [list(sample.token_ids) for sample in group.samples],
            **{column: [value] * count for column, value in columns.items()},
            **self.options,
        }
        return arguments if self.takes_all else {k: v for k, v in arguments.items() if k in self.accepted}

    def __call__(self, group: Group) -> list[float]:
        try:
            values = self.function(**self.arguments(group))
            if inspect.isawaitable(values):
                values = asyncio.run(values)
        except Exception as error:  # the user's code: told in one line with their frames (filter.score_groups)
            # no frame of theirs where the call itself failed (an argument it needs and is not given)
            where = user_frames(error.__traceback__) or defined_at(self.function)
            raise RewardFunctionError(self.name, f"raised {one_line(error)}", where) from None
        try:
            return checked_rewards(values, len(group.samples))
        except MalformedRewards as error:
            raise RewardFunctionError(self.name, str(error), defined_at(self.function)) from None
