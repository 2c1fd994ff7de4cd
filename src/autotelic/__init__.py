"""autotelic: language-model agents that improve themselves by reinforcement learning."""

__version__ = "0.1.0"
