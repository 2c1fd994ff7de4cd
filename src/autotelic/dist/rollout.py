"""Rollout workers as Ray actors, behind the same ``generate(tasks, sizes, max_new_tokens)`` call as the
in-process generators.

Each actor builds its own policy copy and generator from a picklable ``build`` function (the trainer's
own builders, so every generate mode works remotely). The pool splits a step's tasks across the actors.
After each optimizer step the trainer calls ``publish``, which puts the trainable weights in Ray's object
store once; before generating, every actor loads the newest published weights with their policy version.
Synchronous training publishes before each step's rollouts, so generation stays on-policy as in-process;
asynchronous rollouts (``rollout/asynchronous.py``) generate from whatever was published last.

A dead actor is replaced by a fresh one (``dist/actors.py``), which loads the weights its peers hold
and gets the dead one's share of the step again; the run goes on and ``restarts`` counts it.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import torch

from autotelic.dist.actors import ActorPool, PoolFront, split
from autotelic.dist.envs import RayEnvPool
from autotelic.rollout.generate import EpisodeSampler
from autotelic.types import Group, Task


class _RolloutActor:
    """Holds a policy copy and a generator; ``build(index)`` returns (policy, generator)."""

    role = "rollout worker"

    def __init__(self, build: Callable[[int], tuple[Any, Any]], index: int) -> None:
        self.policy, self.generator = build(index)

    def load(self, weights: dict[str, Any], version: int) -> int:
        with warnings.catch_warnings():  # read-only arrays in the object store: load_state_dict copies them
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            self.policy.load_trainable_state({name: torch.from_numpy(value) if isinstance(value, np.ndarray) else value
                                              for name, value in weights.items()})
        self.policy.version = version
        return version

    def generate(self, tasks: list[Task], sizes: list[int], max_new_tokens: int) -> list[Group]:
        return self.generator.generate(tasks, sizes, max_new_tokens)

    def env_pool(self) -> RayEnvPool | None:
        """This worker's own environment actors (``dist.env_workers``), if it has them."""
        pool = self.generator.make_env if isinstance(self.generator, EpisodeSampler) else None
        return pool if isinstance(pool, RayEnvPool) else None


def _env_restarts(actor: _RolloutActor) -> float:  # run inside a rollout worker by ``ActorPool.answers``
    pool = actor.env_pool()
    return float(pool.restarts) if pool is not None else 0.0


def _env_peak_rss_mib(actor: _RolloutActor) -> float:  # run inside a rollout worker by ``ActorPool.largest``
    pool = actor.env_pool()
    return pool.peak_rss_mib() if pool is not None else 0.0


def _shareable(state: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Tensors as numpy arrays where numpy has the dtype: Ray stores those without pickling and actors read
    them in place (for the 135M model, 0.1 s instead of 2 s per update); bfloat16 stays a tensor."""
    return {name: tensor.detach().cpu().numpy() if tensor.dtype != torch.bfloat16 else tensor.detach().cpu()
            for name, tensor in state.items()}


class RayRolloutPool(PoolFront):
    def __init__(self, build: Callable[[int], tuple[Any, Any]], workers: int, cpus_per_worker: float = 1.0,
                 gpus_per_worker: float = 0.0) -> None:
        # (weights in the object store, policy version): the newest published, and what the actors hold
        self._published: tuple[Any, int] | None = None
        self._loaded: tuple[Any, int] | None = None
        self.pool = ActorPool(_RolloutActor, build, workers, cpus_per_worker, gpus_per_worker, self._catch_up)

    def publish(self, policy: Any) -> None:
        """Make the policy's current weights the ones the actors generate with next (once per version).
        Called by the trainer's thread; the actors load them in ``generate``, which may run on another."""
        if self._published is None or policy.version != self._published[1]:
            import ray

            self._published = (ray.put(_shareable(policy.trainable_state())), policy.version)

    def _catch_up(self, actor: Any) -> None:
        """A replacement actor takes the weights its peers generate with."""
        if self._loaded is not None:
            import ray

            ray.get(actor.load.remote(*self._loaded))

    def env_restarts(self) -> int:
        """Environment actors replaced inside the live rollout workers, as they last reported it (asked without
        waiting behind their generation, as ``peak_rss_mib``; a replaced worker's count goes once its replacement
        answers)."""
        return int(sum(self.pool.answers(_env_restarts).values()))

    def env_peak_rss_mib(self) -> float:
        """The largest peak memory of the environment actors inside the rollout workers, in MiB (asked through
        each worker without waiting behind its generation, as ``peak_rss_mib``)."""
        return self.pool.largest(_env_peak_rss_mib)

    def generate(self, tasks: list[Task], sizes: int | list[int], max_new_tokens: int) -> list[Group]:
        if self._published is not None and self._published is not self._loaded:
            self._loaded = self._published
            self.pool.broadcast("load", *self._loaded)
        sizes = [sizes] * len(tasks) if isinstance(sizes, int) else list(sizes)
        shares = [([tasks[j] for j in share], [sizes[j] for j in share], max_new_tokens)
                  for share in split(len(tasks), len(self.actors))]
        return [group for groups in self.pool.map("generate", shares) for group in groups]
