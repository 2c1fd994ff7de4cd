"""The shipped recipes: the YAML files of this package (data files they name sit in ``data/``), found by
importlib.resources so that ``--config NAME`` works wherever autotelic is installed. The repository's
``recipes`` folder is a link to this one."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from importlib import resources
from itertools import groupby
from pathlib import Path

from autotelic.config import ConfigError, GenerateConfig
from autotelic.config.docs import field_docs, first_sentence
from autotelic.config.loading import build_config, read_recipe

LISTING_WIDTH = 100


def shipped_dir() -> Path:
    """The folder the recipes are installed in (pip installs a package as files, so it is a real folder)."""
    return Path(str(resources.files(__name__)))


def shipped_names() -> list[str]:
    return sorted(path.stem for path in shipped_dir().glob("*.yaml"))


def find_recipe(given: str | Path) -> Path:
    """A recipe file: ``given`` as a path if it is a file, else the shipped recipe of that name (``.yaml``
    optional)."""
    path = Path(given)
    if path.is_file():
        return path
    shipped = shipped_dir() / f"{path.name.removesuffix('.yaml')}.yaml"
    if path.parent == Path(".") and shipped.is_file():
        return shipped
    raise ConfigError(f"config file not found: {given}; give a YAML file or a shipped recipe: "
                      f"{', '.join(shipped_names())} (see autotelic recipes)")


def leading_comment(text: str) -> str:
    """The comment block a recipe opens with, as one line."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return " ".join(lines)


@dataclass(frozen=True)
class Recipe:
    name: str
    mode: str
    """Its ``generate.mode``: how it generates rollouts, the kind ``autotelic recipes`` groups it under."""
    summary: str
    """The first sentence of its leading comment."""


def shipped_recipes() -> list[Recipe]:
    """Every shipped recipe, by name."""
    found = []
    for name in shipped_names():
        path = shipped_dir() / f"{name}.yaml"
        mode = build_config(read_recipe(path)).generate.mode
        found.append(Recipe(name, mode, first_sentence(leading_comment(path.read_text()))))
    return found


def mode_phrase(mode: str) -> str:
    """What ``generate.mode``'s documentation says a mode does, e.g. 'tree (samples branched at high-entropy
    tokens)'; the bare name for a mode it does not list (an installed package's)."""
    doc = field_docs(GenerateConfig, whole=True)["mode"]
    found = re.search(rf"\b{re.escape(mode)} \(([^()]*?)(?:, see ``\w+``)?\)", doc)
    return f"{mode} ({found.group(1).replace('``', '')})" if found else mode


def recipe_listing(recipes: list[Recipe]) -> list[str]:
    """The recipes grouped by generation mode (the default's first), one line each, at most LISTING_WIDTH
    columns."""
    default_mode = GenerateConfig().mode
    ordered = sorted(recipes, key=lambda recipe: (recipe.mode != default_mode, recipe.mode, recipe.name))
    width = max(len(recipe.name) for recipe in recipes)
    lines: list[str] = []
    for mode, members in groupby(ordered, key=lambda recipe: recipe.mode):
        if lines:
            lines.append("")
        lines.append(textwrap.shorten(f"generate.mode={mode_phrase(mode)}", LISTING_WIDTH))
        for recipe in members:
            lead = f"  {recipe.name:<{width}}  "
            summary = textwrap.shorten(recipe.summary, LISTING_WIDTH - len(lead), placeholder=" ...",
                                       break_on_hyphens=False)
            lines.append(lead + summary)
    return lines
