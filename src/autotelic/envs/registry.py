"""Environments by name (``ENVIRONMENTS``): a built-in one, a registered one, an installed package's entry point,
or a module's dotted path.

An environment module exposes ``load_environment(**kwargs) -> EnvironmentSpec`` (verifiers' convention): the
factory of fresh environments, the tasks its episodes are played on, and the rewards a run uses unless it
names its own. The built-in environments are modules of this package found the same way (``BUILT_IN``); a
package announces its own under the ``autotelic.environments`` entry-point group; any other name is imported
as a module (``generate.env=my_pkg.env_module``, found on PYTHONPATH, or ``path/to/env.py``).
``generate.env_args`` are the kwargs.

A loaded environment's task family joins ``get_family``'s names, since verifiers and the held-out set look
families up by the name their tasks carry.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any, NoReturn

from autotelic.envs import Environment, Step, UnknownEnvironmentError
from autotelic.registry import Registry, import_user_module, is_missing
from autotelic.tasks import TaskFamily, add_family
from autotelic.tasks.files import answer_score
from autotelic.types import Task
from autotelic.user_code import UserCodeError, as_number, one_line, task_label, user_frames

# name -> (module exposing load_environment, its kwargs)
BUILT_IN: dict[str, tuple[str, dict[str, Any]]] = {
    "guess_number": ("autotelic.envs.guess_number", {}),
    "calculator": ("autotelic.envs.tools", {"tool": "calculator"}),  # tool use on arithmetic families
    "python": ("autotelic.envs.tools", {"tool": "python"}),
    "textarena": ("autotelic.envs.textarena_games", {}),  # self-play on the ta_* families
    "web": ("autotelic.envs.web.env", {"driver": "html"}),  # the web_* families over plain HTTP (fast)
    "web_browser": ("autotelic.envs.web.env", {"driver": "browser"}),  # the same in headless Chromium
    # the same with a screenshot in each observation, for vision-language policies (backends/vision.py)
    "web_screenshot": ("autotelic.envs.web.env", {"driver": "browser", "screenshot": True}),
}
# An entry is a module with load_environment or that function itself: the built-ins, those registered, those
# installed packages announce under the autotelic.environments entry-point group.
ENVIRONMENTS: Registry[ModuleType | Callable[..., Any]] = Registry(
    "environment", {name: module for name, (module, _) in BUILT_IN.items()})
_FIX = (f"built in: {', '.join(BUILT_IN)}; or a module with load_environment(**kwargs) by dotted path "
        f"(my_pkg.my_env, found on PYTHONPATH) or installed under the '{ENVIRONMENTS.group}' entry point")


class TaskList:
    """A task family over a fixed list of tasks (an environment's own), drawn at random within a level and
    scored strictly against their answers as a data file's are."""

    def __init__(self, tasks: Sequence[Task]) -> None:
        names = {task.family for task in tasks}
        if len(names) != 1:
            raise ValueError(f"an environment's tasks must share one family name, got {sorted(names) or 'no tasks'}")
        (self.name,) = names
        self.by_level: dict[int, list[Task]] = {}
        for task in tasks:
            self.by_level.setdefault(task.level, []).append(task)
        self.levels = tuple(sorted(self.by_level))

    def generate(self, rng: random.Random, level: int) -> Task:
        return rng.choice(self.by_level[level])

    def score(self, task: Task, completion: str) -> float:
        return answer_score(task.answer, completion)


@dataclass(frozen=True)
class EnvironmentSpec:
    """What ``load_environment`` returns."""

    make_env: Callable[[], Environment]
    """A fresh environment per call (one per episode, so episodes share no state)."""
    tasks: TaskFamily | Sequence[Task] | None = None
    """The tasks it is played on, by default (``curriculum.families``); None: any family's (a tool environment)."""
    rewards: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    """Its default ``filter.rewards`` entries, e.g. ``[{"name": "env"}]`` (the episode's return); empty: the run's."""

    @property
    def family(self) -> TaskFamily | None:
        if isinstance(self.tasks, Sequence):
            return TaskList(self.tasks)
        return self.tasks


_LOADED: dict[tuple[str, str], EnvironmentSpec] = {}


def _locate(name: str) -> tuple[ModuleType | Callable[..., Any], dict[str, Any]]:
    """The module (or ``load_environment`` function) ``name`` stands for, and its built-in kwargs."""
    found = ENVIRONMENTS.find(name)
    if found is not None:
        return found, BUILT_IN[name][1] if name in BUILT_IN else {}
    try:
        module = import_user_module(name)
    except ModuleNotFoundError as error:
        if is_missing(error, name):  # not a module it imports
            raise UnknownEnvironmentError(f"unknown environment '{name}'; {_FIX}") from None
        raise UnknownEnvironmentError(f"environment module '{name}' failed to import: {error}") from None
    except Exception as error:
        raise UnknownEnvironmentError(f"environment module '{name}' failed to import: "
                                      f"{type(error).__name__}: {error}") from None
    if not callable(getattr(module, "load_environment", None)):
        raise UnknownEnvironmentError(f"unknown environment '{name}': the module {name} has no "
                                      f"load_environment(**kwargs) returning an EnvironmentSpec; {_FIX}")
    return module, {}


def load_environment(name: str, args: Mapping[str, Any] | None = None) -> EnvironmentSpec:
    """The environment ``name`` built with ``args`` (once per process; its task family joins ``get_family``)."""
    key = (name, json.dumps(args or {}, sort_keys=True, default=str))
    if key in _LOADED:
        return _LOADED[key]
    load, kwargs = _locate(name)
    if isinstance(load, ModuleType):  # not its load_environment function itself
        load = load.load_environment
    try:
        spec = load(**{**kwargs, **(args or {})})
    except Exception as error:
        raise UnknownEnvironmentError(f"load_environment of environment '{name}' raised {one_line(error)} "
                                      f"{user_frames(error.__traceback__)}".strip()) from None
    if not isinstance(spec, EnvironmentSpec):
        raise UnknownEnvironmentError(f"load_environment of environment '{name}' returned {type(spec).__name__}, "
                                      "not an autotelic.envs.registry.EnvironmentSpec")
    try:
        family = spec.family
    except ValueError as error:
        raise UnknownEnvironmentError(f"environment '{name}': {error}") from None
    _check_calls(name, spec.make_env)
    if name not in BUILT_IN:  # a user's code: its failures are told in one line with their frames
        spec = replace(spec, make_env=GuardedFactory(spec.make_env, name))
    if family is not None:
        add_family(family)
    _LOADED[key] = spec
    return spec


class GuardedEnvironment:
    """A user's environment whose reset, step or close that raises, or a step that returns something other than a
    Step with a finite number for its reward, stops the run in one line (UserCodeError) naming the environment,
    the call, the task and the user's own frames, rather than a traceback from deep in the episode generator."""

    def __init__(self, env: Environment, name: str) -> None:
        self.env, self.name = env, name
        self.task: Task | None = None

    def reset(self, task: Task) -> str:
        self.task = task
        return self._text("reset", self._call("reset", task))

    def step(self, action: str) -> Step:
        result = self._call("step", action)
        if not isinstance(result, tuple) or len(result) != 4:
            self._fail("step", f"returned {type(result).__name__} ({result!r:.40}), not a "
                               "Step(observation, reward, done, info)")
        step = Step(*result)
        reward = as_number(step.reward)
        if reward is None or not math.isfinite(reward):
            self._fail("step", f"returned the reward {step.reward!r:.40}, not a finite number")
        if not isinstance(step.info, Mapping):
            self._fail("step", f"returned info {step.info!r:.40}, not a dict")
        self._text("step", step.observation)
        return step

    def _text(self, method: str, observation: Any) -> str:
        """An observation, which the policy reads as a user message: text (an image is a marker in it)."""
        if not isinstance(observation, str):
            self._fail(method, f"returned the observation {observation!r:.40} ({type(observation).__name__}), "
                               "not a str")
        return observation

    def close(self) -> None:
        self._call("close")

    def _call(self, method: str, *arguments: Any) -> Any:
        try:
            return getattr(self.env, method)(*arguments)
        except Exception as error:
            self._fail(method, f"raised {one_line(error)}", user_frames(error.__traceback__))

    def _fail(self, method: str, problem: str, where: str = "") -> NoReturn:
        on_task = f"on {task_label(self.task)}" if self.task is not None else ""
        call = f"environment {self.name}: {type(self.env).__qualname__}.{method}"
        raise UserCodeError(" ".join(filter(None, (call, problem, on_task, where))) + "; fix it") from None


@dataclass(frozen=True)
class GuardedFactory:
    """A user's environment factory whose environments are GuardedEnvironments (picklable, for env actors)."""

    make_env: Callable[[], Environment]
    name: str

    def __call__(self) -> GuardedEnvironment:
        return GuardedEnvironment(self.make_env(), self.name)


def _check_calls(name: str, make_env: Callable[[], Environment]) -> None:
    """One environment built and closed: one that lacks a call episodes make is named now, not mid-run."""
    env = make_env()
    if not isinstance(env, Environment):
        missing = [f"{call}()" for call in ("reset", "step", "close") if not callable(getattr(env, call, None))]
        raise UnknownEnvironmentError(f"environment '{name}': its {type(env).__name__} has no {', '.join(missing)}; "
                                      "an environment has reset(task), step(action) and close() (which may do nothing)")
    env.close()


def environment_names() -> list[str]:
    """The built-in, registered and installed environments (any module path works besides)."""
    return ENVIRONMENTS.names()
