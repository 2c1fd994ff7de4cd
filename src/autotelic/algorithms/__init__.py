"""Losses as pure tensor functions (they import only torch and ``types``), chosen by name."""

from autotelic.algorithms.grpo import GRPOSettings, group_advantages, grpo_loss

ALGORITHMS = ("grpo",)

__all__ = ["ALGORITHMS", "GRPOSettings", "group_advantages", "grpo_loss"]
