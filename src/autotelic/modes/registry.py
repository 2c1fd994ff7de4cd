"""A generation mode is one plug-in: its generator, the settings it cannot honour, and what it changes about
the run around it (how many models train, how the held-out set is played). The trainer, the builder and the
checks ask the mode; none of them knows a mode by name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from autotelic.algorithms import AlgorithmSpec
from autotelic.backends import PolicyBackend
from autotelic.config import RunConfig
from autotelic.heldout import HeldOut
from autotelic.registry import Registry
from autotelic.rollout.filter import GroupFilter
from autotelic.rollout.generate import RolloutWorker


@dataclass(frozen=True)
class Built:
    """What a mode's generator is built around: the run's config, the model that samples (the policy or a
    vLLM engine on its weights), the held-out set that self-written tasks must avoid, and every agent that
    trains (the policy alone except in multi-agent modes)."""

    config: RunConfig
    policy: PolicyBackend
    heldout: HeldOut
    agents: list[PolicyBackend]


def no_problems(config: RunConfig, spec: AlgorithmSpec) -> list[str]:
    return []


def one_agent(config: RunConfig) -> int:
    return 1


def no_filters(config: RunConfig) -> list[GroupFilter]:
    return []


@dataclass(frozen=True)
class Mode:
    name: str
    generator: Callable[[Built], RolloutWorker]
    problems: Callable[[RunConfig, AlgorithmSpec], list[str]] = no_problems
    """Settings, each valid alone, that this mode cannot honour: one line each."""
    agents: Callable[[RunConfig], int] = one_agent
    """How many models train (each on its own groups, ``Group.agent``)."""
    agent_model: Callable[[RunConfig, int], str | None] = lambda config, index: None
    """The model an agent starts from (a directory or random:<shape>); None: ``model.path``."""
    agent_lr: Callable[[RunConfig, int], float | None] = lambda config, index: None
    """An agent's learning rate; None: ``algorithm.lr``; 0: the agent keeps its weights (it is never updated)."""
    branches: bool = False
    """Groups grow by branching (tree): a group of one sample per task still has siblings to compare."""
    games: bool = False
    """``generate.env`` names a two-player game rather than an environment."""
    holds_envs: Callable[[RunConfig], bool] = lambda config: False
    """Whether its generator steps environments (which ``dist.env_workers`` can hold)."""
    runs_code: Callable[[RunConfig], bool] = lambda config: False
    """Whether its generator runs model-written code (in the sandbox) beyond what tasks and rewards run."""
    filters: Callable[[RunConfig], list[GroupFilter]] = no_filters
    """Group filters of its own, applied ahead of the run's (``filter``): the generator only generates."""
    heldout_agent: Callable[[RunConfig, PolicyBackend, float | None], RolloutWorker] | None = None
    """Plays each held-out task whole (episodes: greedy, or sampled at the temperature given, for pass@k) instead
    of one answer per task."""
    evaluate_together: Callable[[RunConfig, list[PolicyBackend], HeldOut], tuple[dict[str, Any],
                                                                             list[dict[str, Any]]]] | None = None
    """The agents evaluated together on the held-out set (CoMAS's discussion): its summary and records."""


# The built-in modes register themselves as ``modes/__init__`` imports them; outside packages may announce theirs
# under the ``autotelic.generation_modes`` entry point.
MODES: Registry[Mode] = Registry("generation mode")


def register_mode(mode: Mode) -> Mode:
    MODES.register(mode.name, mode)
    return mode


def get_mode(name: str) -> Mode:
    return MODES.get(name)


def refuse_early_exit(config: RunConfig) -> list[str]:
    """For modes whose groups are not plain samples that a probe can decide early."""
    if config.control.early_exit_probe is None:
        return []
    return [f"control.early_exit_probe works with generate.mode sample or episode, not {config.generate.mode}"]


def refuse_remote(config: RunConfig) -> list[str]:
    """For modes whose generator keeps state or several models on the driver."""
    if not config.dist.rollout_workers:
        return []
    return [f"dist.rollout_workers works with generate.mode sample, tree, episode or selfplay, not "
            f"{config.generate.mode} (its generator keeps state or several models on the driver)"]


def refuse_question_notes(config: RunConfig) -> list[str]:
    """For modes whose tasks are not questions the policy answers (games, proposals): nowhere to write a hint or
    a remembered example."""
    cur = config.curriculum
    written = [key for key, on in (("curriculum.hints.fraction", cur.hints.fraction),
                                   ("curriculum.memory.fraction", cur.memory.fraction),
                                   ("curriculum.memory.at_eval", cur.memory.at_eval)) if on]
    return [f"{key} writes into the questions that generate.mode sample, tree, partial, episode or discussion "
            f"answers, not {config.generate.mode}: turn it off" for key in written]


def needs_env(config: RunConfig, example: str) -> list[str]:
    if config.generate.env is not None:
        return []
    return [f"generate.mode={config.generate.mode} needs generate.env (e.g. {example})"]
