"""Loading a run's configuration: defaults, then a YAML recipe, then dotted ``key=value`` overrides, each value
checked against its field's type (unknown keys and wrong types stop with one line naming the key and the valid
choices), then every section's range checks; saving it back as YAML. The environment a recipe names fills in its
defaults above envs, in ``autotelic.loading``."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml

from autotelic.config.rules import ConfigError
from autotelic.config.run import RunConfig
from autotelic.config.sections import RewardSpec


def _coerce(value: Any, annotation: Any, key: str) -> Any:
    """Check ``value`` against a field's type annotation, converting where it is lossless."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, key)
            except ConfigError as error:
                errors.append(str(error))
        raise ConfigError(errors[0])
    if origin is Literal:
        choices = typing.get_args(annotation)
        if value not in choices:
            raise ConfigError(f"config key '{key}' must be one of {', '.join(map(str, choices))}; got {value!r}")
        return value
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}' must be a mapping, got {value!r}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"config key '{key}' must be a list, got {value!r}")
        (item_type,) = typing.get_args(annotation)
        return [_coerce(v, item_type, key) for v in value]
    if dataclasses.is_dataclass(annotation):
        if not isinstance(value, dict):
            raise ConfigError(f"config section '{key}' must be a mapping, got {value!r}")
        return _build(annotation, value, key + ".")
    if annotation is float and not isinstance(value, bool) and isinstance(value, (int, str)):
        try:  # YAML reads 1e-3 (no dot) as a string
            return float(value)
        except ValueError:
            pass
    if annotation is Any or isinstance(value, annotation) and not (annotation is int and isinstance(value, bool)):
        return value
    raise ConfigError(f"config key '{key}' must be {annotation.__name__}, got {value!r}")


MOVED = {
    "generate.tree_branches": "tree.branches", "generate.tree_branch_samples": "tree.branch_samples",
    "generate.partial_segment_tokens": "partial.segment_tokens", "generate.opponent": "selfplay.opponent",
    "control.max_turns": "episode.max_turns", "control.turn_tokens": "episode.turn_tokens",
    "control.max_invalid": "episode.max_invalid", "curriculum.prefix_fraction": "curriculum.prefixes.fraction",
    "curriculum.prefix_per_solution": "curriculum.prefixes.per_line",
    "curriculum.prefix_decay": "curriculum.prefixes.decay",
    "curriculum.prefix_min_reward": "curriculum.prefixes.min_reward",
    "value.train_body": "value.body (frozen, lora or full)",
}
"""Keys that moved to their mode's section (2026-11): a recipe or a saved run naming the old key is told the new."""


def _build(cls: type, data: dict[str, Any], prefix: str = "") -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in data if k not in names]
    if unknown and prefix + unknown[0] in MOVED:
        raise ConfigError(f"config key '{prefix}{unknown[0]}' is now '{MOVED[prefix + unknown[0]]}': rename it")
    if unknown:
        raise ConfigError(f"unknown config key '{prefix}{unknown[0]}'; valid keys here: {', '.join(names)}")
    return cls(**{k: _coerce(v, hints[k], prefix + k) for k, v in data.items()})


def to_dict(config: RunConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"config key '{dotted}': '{part}' is not a section")
    node[leaf] = value


def parse_override(text: str) -> tuple[str, Any]:
    """``train.steps=30`` -> ("train.steps", 30); values are parsed as YAML scalars/lists."""
    if "=" not in text:
        raise ConfigError(f"override '{text}' must look like key=value (e.g. train.steps=30)")
    key, raw = text.split("=", 1)
    if not key.strip():
        raise ConfigError(f"override '{text}' names no key: write key=value (e.g. train.steps=30)")
    try:
        return key.strip(), yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as error:
        problem = str(error).splitlines()[0]
        raise ConfigError(f"override '{text}': the value is not valid YAML ({problem}); write a number, true, "
                          "false, null, a list like [1, 2], or quote text with special characters") from None


def parse_overrides(texts: list[str] | tuple[str, ...]) -> list[tuple[str, Any]]:
    """Each ``key=value``; a word without ``=`` after one is most likely its value split by the shell at a space."""
    for index, text in enumerate(texts):
        start = next((i for i in range(index - 1, -1, -1) if "=" in texts[i]), None)
        if "=" not in text and start is not None:
            words = list(texts[start:index + 1])
            while index + 1 < len(texts) and "=" not in texts[index + 1]:
                index += 1
                words.append(texts[index])
            raise ConfigError(f"override '{text}' is not key=value: the shell split a value at its spaces; quote "
                              f"the whole override: '{' '.join(words)}'")
    return [parse_override(text) for text in texts]


def set_overrides(settings: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> None:
    """Dotted ``key=value`` overrides set into ``settings`` (sections of keys, as a recipe holds them)."""
    for key, value in parse_overrides(overrides):
        _set_dotted(settings, key, value)


def build_config(settings: dict[str, Any]) -> RunConfig:
    """The defaults with ``settings`` on top, each value checked against its field's type, then the range checks."""
    config = _build(RunConfig, settings)
    config.check()
    return config


def reward_specs(entries: list[dict[str, Any]], key: str) -> list[RewardSpec]:
    """Reward entries checked as ``filter.rewards`` are; ``key`` names them in an error."""
    return _coerce(entries, list[RewardSpec], key)


def section_overrides(sections: dict[str, dict[str, Any]]) -> list[str]:
    """Settings by section (``train={"steps": 2}``) as dotted overrides: one per key, so a section given in part
    keeps the recipe's other keys."""
    return [f"{section}.{key}={json.dumps(value)}" for section, values in sections.items()
            for key, value in values.items()]


def read_recipe(path: Path) -> dict[str, Any]:
    """The settings a YAML recipe holds."""
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        loaded = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ConfigError(f"config file {path} is not valid YAML: {error}".splitlines()[0]) from error
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not text: a recipe is a UTF-8 YAML file") from None
    if loaded is not None and not isinstance(loaded, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return loaded or {}


def missing_package(setting: str, package: str, extra: str) -> str | None:
    """The problem of ``setting`` (key=value) when the optional ``package`` it needs is not installed."""
    if importlib.util.find_spec(package) is not None:
        return None
    return f"{setting} needs the '{package}' package: pip install {package}, or pip install 'autotelic[{extra}]'"


def save_config(config: RunConfig, path: Path) -> None:
    path.write_text(yaml.safe_dump(to_dict(config), sort_keys=False))
