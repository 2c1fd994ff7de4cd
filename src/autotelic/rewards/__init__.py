"""Reward functions: verifiers that turn a completion into a number (Filter stage inputs)."""
