"""Environment workers as Ray actors: the episodes' environments (a browser, a code sandbox, a game) live in
a pool of actors instead of the generating process, behind the ``Environment`` calls.

A ``RayEnvPool`` is an episode generator's ``make_env``: each call returns a ``RemoteEnv`` placed on the next
actor in turn, which builds the real environment there on its first call. ``RemoteEnv.start`` (registered as
``envs.start_call``'s) lets ``envs.call_all`` start a batch's steps on every actor before waiting, so the actors
step in parallel.

A dead actor is replaced, and each environment it held is rebuilt on the replacement by replaying its calls
since its reset (environments are deterministic given the task and the actions: the episode's recorded
observations stay true); the episode goes on and ``restarts`` counts the replacements. A user's environment that
fails there (``envs/registry.GuardedEnvironment``) stops the run with its one line, as in-process.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

from autotelic.dist.actors import ActorPool, PoolFront
from autotelic.envs import Environment, start_call
from autotelic.errors import TrainingError

REBUILD_ATTEMPTS = 3


class EnvWorkerError(RuntimeError):
    pass


class _EnvActor:
    """Holds the environments of many episodes, by key."""

    role = "environment worker"

    def __init__(self, make_env: Callable[[], Environment], index: int) -> None:
        self.make_env, self.envs = make_env, {}

    def call(self, key: int, method: str, argument: Any) -> Any:
        if key not in self.envs:
            self.envs[key] = self.make_env()
        return getattr(self.envs[key], method)(argument)

    def close(self, key: int) -> None:
        env = self.envs.pop(key, None)
        if env is not None:  # built on its first call: an episode never reset has none
            env.close()


class RemoteEnv:
    """One episode's environment in an env actor, with the calls a replacement actor would replay."""

    def __init__(self, pool: ActorPool, slot: int, key: int) -> None:
        self.pool, self.slot, self.key = pool, slot, key
        self.actor = pool.actors[slot]
        self.calls: list[tuple[str, Any]] = []  # since the last reset

    def start(self, method: str, argument: Any) -> Callable[[], Any]:
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        call = self.actor.call.remote(self.key, method, argument)

        def finish() -> Any:
            if method == "reset":
                self.calls = []
            try:
                result = ray.get(call)
            except RayActorError:
                result = self._rebuild(method, argument)
            except RayTaskError as error:
                if isinstance(error.cause, TrainingError):  # its one line, not the actor's traceback around it
                    raise error.cause from None
                raise
            self.calls.append((method, argument))
            return result

        return finish

    def _rebuild(self, method: str, argument: Any) -> Any:
        """The environment again on a replacement actor (the episode's calls replayed), then this call."""
        import ray
        from ray.exceptions import RayActorError

        for _ in range(REBUILD_ATTEMPTS):
            self.actor = self.pool.replace(self.slot, self.actor)
            try:
                for past in self.calls:
                    ray.get(self.actor.call.remote(self.key, *past))
                return ray.get(self.actor.call.remote(self.key, method, argument))
            except RayActorError:
                continue
        raise EnvWorkerError(f"environment worker {self.slot} died {REBUILD_ATTEMPTS} times in a row while its "
                             f"episodes were rebuilt")

    def reset(self, task: Any) -> str:
        return self.start("reset", task)()

    def step(self, action: str) -> Any:
        return self.start("step", action)()

    def close(self) -> None:
        self.actor.close.remote(self.key)  # not waited for: a dead actor has nothing left to close


@start_call.register
def _start_remote(env: RemoteEnv, method: str, argument: Any) -> Callable[[], Any]:
    return env.start(method, argument)


class RayEnvPool(PoolFront):
    """``make_env`` for episode generators, with the environments in ``workers`` Ray actors."""

    def __init__(self, make_env: Callable[[], Environment], workers: int, cpus_per_worker: float = 1.0) -> None:
        self.pool = ActorPool(_EnvActor, make_env, workers, cpus_per_worker)
        self._keys = itertools.count()

    def __call__(self) -> RemoteEnv:
        key = next(self._keys)
        return RemoteEnv(self.pool, key % len(self.pool.actors), key)
