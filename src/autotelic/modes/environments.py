"""Environments for the modes that step them (episodes, the proposer's executor tools): built in this process,
or held by ``dist.env_workers`` Ray actors (a rollout worker's own, when built in one)."""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

from autotelic.config import RunConfig
from autotelic.envs import Environment, make_env_factory
from autotelic.sandbox import configure as configure_sandbox


def env_factory(config: RunConfig, name: str, args: dict[str, Any] | None = None) -> Callable[[], Environment]:
    """Fresh environments of ``name`` (built with ``args``) for training episodes."""
    make_env = make_env_factory(name, args)
    if not config.dist.env_workers:
        return make_env
    from autotelic.dist.actors import connect
    from autotelic.dist.envs import RayEnvPool

    connect(config.dist)
    return RayEnvPool(partial(_sandboxed_env, config.sandbox.isolation, make_env), config.dist.env_workers,
                      config.dist.cpus_per_worker)


def run_env_factory(config: RunConfig) -> Callable[[], Environment]:
    """The run's own environment (``generate.env`` with ``generate.env_args``), built in this process: for
    held-out episodes, and to register its task family."""
    return make_env_factory(config.generate.env, config.generate.env_args)


def _sandboxed_env(isolation: str, make_env: Callable[[], Environment]) -> Environment:
    """An environment built in a Ray actor, whose sandboxes (the python tool's) take the run's isolation."""
    configure_sandbox(isolation)
    return make_env()
