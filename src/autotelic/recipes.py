"""The shipped recipes (``recipes/*.yaml`` beside the package's source), each summed up by its leading comment."""

from __future__ import annotations

import os
from pathlib import Path

from autotelic.config.docs import first_sentence

RECIPES_DIR = Path(__file__).resolve().parents[2] / "recipes"


def leading_comment(path: Path) -> str:
    """The comment block a recipe opens with, as one line."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return " ".join(lines)


def recipe_summaries(directory: Path = RECIPES_DIR) -> list[tuple[str, str]]:
    """(recipe path relative to the working directory, the first sentence of its leading comment), by name."""
    return [(os.path.relpath(path), first_sentence(leading_comment(path))) for path in sorted(directory.glob("*.yaml"))]
