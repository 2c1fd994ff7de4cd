"""autotelic: language-model agents that improve themselves by reinforcement learning.

``autotelic.train(...)`` runs a training run and returns its summary, from a recipe and overrides or from Python
objects as TRL's trainer takes them (``model=``, ``reward_funcs=``, ``train_dataset=``); ``autotelic.Run`` is the
same with callbacks and a handle on the result, ``autotelic.resume`` continues a run; ``autotelic.evaluate(target, ...)`` gives
the held-out accuracy of a run directory or model directory; ``autotelic.load_config`` reads a recipe. The
registries: ``get_family``/``family_names`` (task families), ``build_reward``/``reward_names`` (rewards),
``load_environment``/``environment_names``/``EnvironmentSpec`` (environments), and the types a user's own
environment uses (``Task``, ``Step``). Everything loads on first use, so ``import autotelic`` stays cheap (no
torch, no transformers).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotelic.config import RunConfig

__version__ = "0.1.0"
# name -> (module, attribute), imported on first use
_LAZY: dict[str, tuple[str, str]] = {
    "load_config": ("autotelic.loading", "load_config"),
    "RunConfig": ("autotelic.config", "RunConfig"),
    "ConfigError": ("autotelic.config", "ConfigError"),
    "get_family": ("autotelic.tasks", "get_family"),
    "family_names": ("autotelic.tasks", "family_names"),
    "build_reward": ("autotelic.rewards", "build_reward"),
    "reward_names": ("autotelic.rewards", "reward_names"),
    "load_environment": ("autotelic.envs.registry", "load_environment"),
    "environment_names": ("autotelic.envs.registry", "environment_names"),
    "EnvironmentSpec": ("autotelic.envs.registry", "EnvironmentSpec"),
    "Step": ("autotelic.envs", "Step"),
    "Task": ("autotelic.types", "Task"),
    "Run": ("autotelic.python_api", "Run"),
    "resume": ("autotelic.python_api", "resume"),
}
__all__ = ["train", "evaluate", *_LAZY]


def train(config: str | Path | RunConfig | None = None, overrides: list[str] | tuple[str, ...] = (), *,
          model: Any = None, reward_funcs: Any = None, train_dataset: Any = None, eval_dataset: Any = None,
          callbacks: Any = (), **sections: dict[str, Any]) -> dict[str, Any]:
    """Train as ``autotelic run`` does and return the run summary: ``python_api.train`` says what each argument
    takes (a recipe, overrides, a model, TRL-style reward functions, data sets, callbacks, settings by section)."""
    from autotelic.python_api import train as run

    return run(config, overrides, model=model, reward_funcs=reward_funcs, train_dataset=train_dataset,
               eval_dataset=eval_dataset, callbacks=callbacks, **sections)


def evaluate(target: str | Path, overrides: list[str] | tuple[str, ...] = (), recipe: str | Path | None = None,
             **sections: dict[str, Any]) -> dict[str, Any]:
    """Held-out accuracy of a run directory's exported model or of a model directory, as ``autotelic eval``
    prints it: ``overrides`` as dotted key=value, ``sections`` by section (``eval={"per_level": 4}``); a model
    directory is evaluated on ``recipe``'s tasks and settings (a run directory brings its own)."""
    from autotelic.config import section_overrides
    from autotelic.targets import evaluate_target

    return evaluate_target(target, [*overrides, *section_overrides(sections)], recipe)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'autotelic' has no attribute '{name}'")
    module_name, attribute = _LAZY[name]
    return getattr(importlib.import_module(module_name), attribute)


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
