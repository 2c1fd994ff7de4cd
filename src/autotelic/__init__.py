"""autotelic: language-model agents that improve themselves by reinforcement learning.

``autotelic.train(...)`` runs a training run and returns its summary; ``autotelic.load_config`` reads a recipe.
Both load on first use, so ``import autotelic`` stays cheap (no torch, no transformers).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotelic.config import RunConfig

__version__ = "0.1.0"
__all__ = ["load_config", "train"]


def train(config: str | Path | RunConfig | None = None, overrides: list[str] | tuple[str, ...] = (),
          **sections: dict[str, Any]) -> dict[str, Any]:
    """Train as ``autotelic run`` does and return the run summary (also written to the run's summary.json).

    ``config``: a recipe YAML path, a ``RunConfig``, or None for the defaults. ``overrides``: dotted ``key=value``
    strings, as on the command line. ``sections``: settings by section, applied last, e.g.
    ``train={"steps": 2}, filter={"rewards": [{"name": "my_rewards:fn"}]}``. A bad setting raises ConfigError
    (or TrainingError) before any model loads.
    """
    from autotelic.config import RunConfig, apply_overrides, load_config
    from autotelic.train import train as run

    # each key of a section becomes one override: a section given in part keeps the recipe's other keys
    texts = [*overrides, *(f"{section}.{key}={json.dumps(value)}" for section, values in sections.items()
                           for key, value in values.items())]
    run_config = apply_overrides(config, texts) if isinstance(config, RunConfig) else load_config(config, texts)
    return run(run_config)


def __getattr__(name: str) -> Any:
    if name == "load_config":
        from autotelic.config import load_config

        return load_config
    raise AttributeError(f"module 'autotelic' has no attribute '{name}'")
