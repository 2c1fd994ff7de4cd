"""Generation modes as plug-ins (``registry.py``), one module each; ``get_mode(config.generate.mode)``."""

from autotelic.modes import discussion, episode, propose, sampling, selfplay  # the built-in modes register
from autotelic.modes.registry import MODES, Built, Mode, get_mode, register_mode

__all__ = ["MODES", "Built", "Mode", "get_mode", "register_mode", "discussion", "episode", "propose", "sampling",
           "selfplay"]
