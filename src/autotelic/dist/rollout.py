"""Rollout workers as Ray actors, behind the same ``generate(tasks, sizes, max_new_tokens)`` call as the
in-process generators.

Each actor builds its own policy copy and generator from a picklable ``build`` function (the trainer's
own builders, so every generate mode works remotely). The pool splits a step's tasks across the actors,
and after each optimizer step ``sync`` puts the trainable weights in Ray's object store once and every
actor loads them with the new policy version: generation stays on-policy, as in-process.

A dead actor (its process killed, its node lost) is replaced by a fresh one, which loads the current
weights and gets the dead one's share of the step again; the run goes on and ``restarts`` counts it.

The driver is the same on a laptop and on a cluster: ``address=None`` starts a local Ray instance,
``address="auto"`` or ``"ray://host:10001"`` joins one started with ``ray start``.
"""

from __future__ import annotations

from typing import Any, Callable

from autotelic.types import Group, Task


class _RolloutActor:
    """Holds a policy copy and a generator; ``build(index)`` returns (policy, generator)."""

    def __init__(self, build: Callable[[int], tuple[Any, Any]], index: int) -> None:
        self.policy, self.generator = build(index)

    def load(self, weights: dict[str, Any], version: int) -> int:
        self.policy.load_trainable_state(weights)
        self.policy.version = version
        return version

    def generate(self, tasks: list[Task], sizes: list[int], max_new_tokens: int) -> list[Group]:
        return self.generator.generate(tasks, sizes, max_new_tokens)



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
        self.build, self.restarts, self.version = build, 0, -1
        self._weights: Any = None
        self.actors = [self._remote.remote(build, index) for index in range(workers)]

    def sync(self, policy: Any) -> None:
        """Give every actor the policy's current weights (once per policy version)."""
        if policy.version == self.version:
            return
        from ray.exceptions import RayActorError

        self._weights = self._ray.put(policy.trainable_state())
        self.version = policy.version
        loads = [actor.load.remote(self._weights, self.version) for actor in self.actors]
        for index, load in enumerate(loads):
            try:
                self._ray.get(load)
            except RayActorError:  # died since the last step: a fresh one loads the weights
                self._replace(index)

    def _replace(self, index: int) -> None:
        self.restarts += 1
        self.actors[index] = self._remote.remote(self.build, index + len(self.actors) * self.restarts)  # new seed
        if self._weights is not None:
            self._ray.get(self.actors[index].load.remote(self._weights, self.version))

    def generate(self, tasks: list[Task], sizes: int | list[int], max_new_tokens: int) -> list[Group]:
        from ray.exceptions import RayActorError

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
