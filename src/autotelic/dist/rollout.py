"""Rollout workers as Ray actors, behind the same ``generate(tasks, sizes, max_new_tokens)`` call as the
in-process generators.

Each actor builds its own policy copy and generator from a picklable ``build`` function (the trainer's
own builders, so every generate mode works remotely). The pool splits a step's tasks across the actors.
After each optimizer step the trainer calls ``publish``, which puts the trainable weights in Ray's object
store once; before generating, every actor loads the newest published weights with their policy version.
Synchronous training publishes before each step's rollouts, so generation stays on-policy as in-process;
asynchronous rollouts (``rollout/asynchronous.py``) generate from whatever was published last.

A dead actor (its process killed, its node lost) is replaced by a fresh one, which loads the current
weights and gets the dead one's share of the step again; the run goes on and ``restarts`` counts it.

The driver is the same on a laptop and on a cluster: ``address=None`` starts a local Ray instance,
``address="auto"`` or ``"ray://host:10001"`` joins one started with ``ray start``.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import torch

from autotelic.types import Group, Task


class _RolloutActor:
    """Holds a policy copy and a generator; ``build(index)`` returns (policy, generator)."""

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


def _shareable(state: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Tensors as numpy arrays where numpy has the dtype: Ray stores those without pickling and actors read
    them in place (for the 135M model, 0.1 s instead of 2 s per update); bfloat16 stays a tensor."""
    return {name: tensor.detach().numpy() if tensor.dtype != torch.bfloat16 else tensor
            for name, tensor in state.items()}


def _split(count: int, parts: int) -> list[range]:
    """``count`` items in ``parts`` contiguous, near-equal ranges (empty ones dropped)."""
    bounds = [round(i * count / parts) for i in range(parts + 1)]
    return [range(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


class RayRolloutPool:
    def __init__(self, build: Callable[[int], tuple[Any, Any]], workers: int, address: str | None = None,
                 cpus_per_worker: float = 1.0) -> None:
        import ray

        if workers < 1:
            raise ValueError(f"a rollout pool needs at least one worker, got {workers}")
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     **({"num_cpus": max(1, round(workers * cpus_per_worker))} if address is None else {}))
        self._ray = ray
        self._remote = ray.remote(num_cpus=cpus_per_worker)(_RolloutActor)
        self.build, self.restarts = build, 0
        # (weights in the object store, policy version): the newest published, and what the actors hold
        self._published: tuple[Any, int] | None = None
        self._loaded: tuple[Any, int] | None = None
        self.actors = [self._remote.remote(build, index) for index in range(workers)]

    def publish(self, policy: Any) -> None:
        """Make the policy's current weights the ones the actors generate with next (once per version).
        Called by the trainer's thread; the actors load them in ``generate``, which may run on another."""
        if self._published is None or policy.version != self._published[1]:
            self._published = (self._ray.put(_shareable(policy.trainable_state())), policy.version)

    def _load_published(self) -> None:
        from ray.exceptions import RayActorError

        if self._published is None or self._published is self._loaded:
            return
        self._loaded = weights, version = self._published
        loads = [actor.load.remote(weights, version) for actor in self.actors]
        for index, load in enumerate(loads):
            try:
                self._ray.get(load)
            except RayActorError:  # died since the last step: a fresh one loads the weights
                self._replace(index)

    def _replace(self, index: int) -> None:
        self.restarts += 1
        self.actors[index] = self._remote.remote(self.build, index + len(self.actors) * self.restarts)  # new seed
        if self._loaded is not None:  # the weights its peers generate with
            self._ray.get(self.actors[index].load.remote(*self._loaded))

    def generate(self, tasks: list[Task], sizes: int | list[int], max_new_tokens: int) -> list[Group]:
        from ray.exceptions import RayActorError

        self._load_published()
        sizes = [sizes] * len(tasks) if isinstance(sizes, int) else list(sizes)
        shares = _split(len(tasks), len(self.actors))
        pending = {self.actors[i].generate.remote([tasks[j] for j in share], [sizes[j] for j in share],
                                                  max_new_tokens): i for i, share in enumerate(shares)}
        results: list[list[Group]] = [[] for _ in shares]
        while pending:
            (ref,), _ = self._ray.wait(list(pending), num_returns=1)
            i = pending.pop(ref)
            try:
                results[i] = self._ray.get(ref)
            except RayActorError:  # the actor died: a fresh one does its share again
                self._replace(i)
                share = shares[i]
                pending[self.actors[i].generate.remote([tasks[j] for j in share], [sizes[j] for j in share],
                                                       max_new_tokens)] = i
        return [group for share in results for group in share]

    def shutdown(self) -> None:
        for actor in self.actors:
            self._ray.kill(actor)
