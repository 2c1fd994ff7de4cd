"""A run's configuration as a run gets it: the defaults, then a YAML recipe, then dotted ``key=value`` overrides
(``config.loading`` reads and checks them), then the defaults of the environment a recipe names (``generate.env``):
its tasks and rewards fill ``curriculum.families``/``levels``, ``eval.levels`` and ``filter.rewards`` where the
recipe and overrides set none. It sits above envs, which config may not import; loading the environment here names a
bad ``generate.env`` before anything else runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotelic.config import ConfigError, RunConfig, to_dict
from autotelic.config.loading import build_config, read_recipe, reward_specs, set_overrides
from autotelic.envs import UnknownEnvironmentError
from autotelic.envs.registry import load_environment
from autotelic.recipes import find_recipe


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Defaults, then the YAML file (a path, or a shipped recipe's name), then dotted overrides, then the
    environment's defaults; validated against the dataclasses."""
    recipe = find_recipe(path) if path is not None else None
    config = _configured(read_recipe(recipe) if recipe is not None else {}, overrides)
    dataset = config.algorithm.dataset
    if recipe is not None and dataset is not None and not Path(dataset).is_absolute():
        beside_recipe = recipe.parent / dataset  # recipes name their data files relative to themselves
        if beside_recipe.is_file():
            config.algorithm.dataset = str(beside_recipe.resolve())
    return config


def apply_overrides(config: RunConfig, overrides: list[str] | tuple[str, ...]) -> RunConfig:
    """A copy of ``config`` with dotted ``key=value`` overrides, validated like a loaded config."""
    return _configured(to_dict(config), overrides)


def _configured(settings: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> RunConfig:
    set_overrides(settings, overrides)
    return _with_environment_defaults(build_config(settings), settings)


def _with_environment_defaults(config: RunConfig, settings: dict[str, Any]) -> RunConfig:
    """The environment's own tasks and rewards where neither the recipe nor an override names any (``settings``:
    what they set)."""
    if config.generate.env is None:
        return config
    try:
        spec = load_environment(config.generate.env, config.generate.env_args)
    except UnknownEnvironmentError as error:
        raise ConfigError(str(error)) from None
    family, curriculum, evaluation = spec.family, settings.get("curriculum", {}), settings.get("eval", {})
    if family is not None and "families" not in curriculum:
        config.curriculum.families = [family.name]
        for section, given in ((config.curriculum, curriculum), (config.eval, evaluation)):
            if "levels" not in given:
                section.levels = list(family.levels)
    if spec.rewards and "rewards" not in settings.get("filter", {}):
        config.filter.rewards = reward_specs([dict(reward) for reward in spec.rewards],
                                             f"rewards of environment {config.generate.env}")
    return config
