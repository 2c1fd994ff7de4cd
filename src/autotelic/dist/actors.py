"""Ray actors that share out a step's work and are replaced when they die.

``connect`` starts (or joins) Ray once per run, with room for every pool the config asks for: the same
driver runs on a laptop (``address=None``: a local Ray instance) and on a cluster (``address="auto"`` or
``"ray://host:10001"`` after ``ray start --head``).

An ``ActorPool`` builds each actor (a class naming its ``role``) from a picklable ``build(index)`` (the
trainer's own builders) and hands out work as one share per actor. A pool that cannot fit on the cluster
stops with the numbers instead of waiting. A share whose actor died (its process killed, its node lost) is
run again on a fresh actor, which ``on_replace`` first brings up to date (e.g. loads the current weights);
``restarts`` counts them for the metrics.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Iterator
from typing import Any, Callable

from autotelic.backends.memory import peak_rss_mib
from autotelic.config import ConfigError, DistConfig

log = logging.getLogger(__name__)


_REPORT_WAIT_S = 0.1  # an idle actor answers in milliseconds


def _actor_peak_rss_mib(_actor: Any) -> float:  # run inside an actor by ``__ray_call__``, whatever its class
    return peak_rss_mib()


class ClusterTooSmallError(ConfigError):
    pass


class ClusterUnreachableError(ConfigError):
    pass


def connect(dist: DistConfig) -> None:
    """Start a local Ray instance sized for the run's workers, or join ``dist.address``; once per process."""
    import ray

    if ray.is_initialized():
        return
    if dist.address is not None:
        check_address(dist.address)
        try:
            ray.init(address=dist.address, include_dashboard=False, log_to_driver=False)
        except ConnectionError as error:
            raise ClusterUnreachableError(_unreachable(dist.address, error)) from error
        return
    env_workers = dist.env_workers * max(1, dist.rollout_workers)  # each rollout worker has its own
    workers = dist.rollout_workers + dist.reward_workers + dist.train_workers + env_workers
    ray.init(num_cpus=max(1, round(workers * dist.cpus_per_worker)), include_dashboard=False, log_to_driver=False)


def check_address(address: str) -> None:
    """A cluster address (``host:port`` of the head's GCS) where nothing listens stops here at once: Ray itself
    retries such an address for minutes before it gives up. "auto" and ``ray://`` addresses are Ray's to resolve."""
    host, _, port = address.rpartition(":")
    if "://" in address or not port.isdigit():  # "auto" has no port
        return
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except OSError as error:
        raise ClusterUnreachableError(
            f"dist.address={address}: no Ray cluster answers there ({error.strerror or error}): start one with "
            "`ray start --head` on that machine, or leave dist.address unset for a local Ray instance") from error


def _unreachable(address: str, error: BaseException) -> str:
    """Why ``ray.init(address=...)`` failed, in the one line a user needs (Ray's own error hides a missing token)."""
    causes: list[BaseException] = []
    cause: BaseException | None = error
    while cause is not None and cause not in causes:
        causes.append(cause)
        cause = cause.__cause__ or cause.__context__
    if any(type(c).__name__ == "AuthenticationError" or "InvalidAuthToken" in str(c) for c in causes):
        return (f"dist.address={address}: the Ray cluster there asks for its token (Ray's token authentication, on "
                "by default for clusters since Ray 2.59): run this driver, as every `ray start`, with "
                "RAY_AUTH_MODE=token and the head's token (`ray get-auth-token` there) in RAY_AUTH_TOKEN or "
                "~/.ray/auth_token")
    return f"dist.address={address}: Ray could not join the cluster there: {error}"


def actor_threads(model_threads: int | None, cpus_per_worker: float) -> int:
    """torch threads in an actor: ``model.threads`` if set, else the CPUs Ray reserved for it (not every core)."""
    return model_threads or max(1, int(cpus_per_worker))


def check_room(role: str, workers: int, cpus: float, gpus: float) -> None:
    """Stop at once, naming the numbers, when one worker asks for more than any node of the Ray cluster has (Ray
    would wait for it forever); warn when the workers together need more than the cluster has in all."""
    import ray

    nodes = [node["Resources"] for node in ray.nodes() if node["Alive"]]
    for resource, amount, setting in (("CPU", cpus, "dist.cpus_per_worker"), ("GPU", gpus, "dist.gpus_per_worker")):
        largest = max((node.get(resource, 0.0) for node in nodes), default=0.0)
        if amount > largest:
            raise ClusterTooSmallError(
                f"each {role} asks Ray for {amount:g} {resource}, but no node of the Ray cluster has more than "
                f"{largest:g}: lower {setting}, or add a node with enough {resource}s")
        total = sum(node.get(resource, 0.0) for node in nodes)
        if workers * amount > total:
            log.warning("%d %ss need %g %s in all, the Ray cluster has %g: some wait until others finish",
                        workers, role, workers * amount, resource, total)


def split(count: int, parts: int) -> list[range]:
    """``count`` items in ``parts`` contiguous, near-equal ranges (empty ones dropped)."""
    bounds = [round(i * count / parts) for i in range(parts + 1)]
    return [range(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def completed(ray: Any, pending: dict[Any, int]) -> Iterator[tuple[int, Any]]:
    """(index, ref) of each of ``pending``'s refs, removed from it as it finishes, the first finished first;
    refs added to ``pending`` meanwhile are waited for too."""
    while pending:
        (ref,), _ = ray.wait(list(pending), num_returns=1)
        yield pending.pop(ref), ref


class ActorPool:
    def __init__(self, actor_class: type, build: Callable[[int], Any], workers: int, cpus_per_worker: float = 1.0,
                 gpus_per_worker: float = 0.0, on_replace: Callable[[Any], None] | None = None) -> None:
        import ray

        if workers < 1:
            raise ValueError(f"an actor pool needs at least one worker, got {workers}")
        if not ray.is_initialized():  # used on its own (tests, notebooks): a local instance just for it
            ray.init(num_cpus=max(1, round(workers * cpus_per_worker)), include_dashboard=False, log_to_driver=False)
        check_room(actor_class.role, workers, cpus_per_worker, gpus_per_worker)
        self._ray = ray
        self._remote = ray.remote(num_cpus=cpus_per_worker, num_gpus=gpus_per_worker)(actor_class)
        self.build, self.on_replace, self.restarts = build, on_replace, 0
        self._questions: dict[Callable[[Any], float], dict[Any, int]] = {}  # in flight -> the actor's index
        self._answers: dict[Callable[[Any], float], dict[int, float]] = {}
        self._largest: dict[Callable[[Any], float], float] = {}
        self.actors = [self._remote.remote(build, index) for index in range(workers)]

    def replace(self, index: int, dead: Any = None) -> Any:
        """A fresh actor in place of actor ``index`` (unless it was already replaced since the caller saw ``dead``);
        returns the actor now at ``index``."""
        if dead is not None and self.actors[index] is not dead:
            return self.actors[index]
        self.restarts += 1
        self.actors[index] = self._remote.remote(self.build, index + len(self.actors) * self.restarts)  # new seed
        if self.on_replace is not None:
            self.on_replace(self.actors[index])
        return self.actors[index]

    def broadcast(self, method: str, *args: Any) -> None:
        """Every actor runs ``method(*args)``; one found dead is replaced (``on_replace`` brings it up to date)."""
        from ray.exceptions import RayActorError

        calls = [getattr(actor, method).remote(*args) for actor in self.actors]
        for index, call in enumerate(calls):
            try:
                self._ray.get(call)
            except RayActorError:
                self.replace(index)

    def map(self, method: str, shares: list[tuple[Any, ...]]) -> list[Any]:
        """Actor i runs ``method(*shares[i])``; results in share order. A dead actor's share runs again on its
        replacement."""
        from ray.exceptions import RayActorError

        if len(shares) > len(self.actors):
            raise ValueError(f"{len(shares)} shares for {len(self.actors)} actors")
        pending = {getattr(self.actors[i], method).remote(*args): i for i, args in enumerate(shares)}
        results: list[Any] = [None] * len(shares)
        for i, ref in completed(self._ray, pending):
            try:
                results[i] = self._ray.get(ref)
            except RayActorError:
                self.replace(i)
                pending[getattr(self.actors[i], method).remote(*shares[i])] = i
        return results

    def answers(self, report: Callable[[Any], float]) -> dict[int, float]:
        """Each actor's latest answer to ``report(actor instance)``, by index (an actor not heard from yet is
        absent). Each actor is asked once at a time and waited for at most ``_REPORT_WAIT_S``: Ray runs an
        actor's calls in order, so one busy generating ahead (asynchronous rollouts) answers after that work,
        and its answer counts at a later call instead of holding up the step. A dead actor's question is
        dropped; its last answer stands until its replacement's comes."""
        from ray.exceptions import RayActorError

        questions = self._questions.setdefault(report, {})
        latest = self._answers.setdefault(report, {})
        asked = set(questions.values())
        for index, actor in enumerate(self.actors):
            if index not in asked:
                questions[actor.__ray_call__.remote(report)] = index
        ready, _ = self._ray.wait(list(questions), num_returns=len(questions), timeout=_REPORT_WAIT_S)
        for ref in ready:
            index = questions.pop(ref)
            with contextlib.suppress(RayActorError):
                latest[index] = self._ray.get(ref)
        return latest

    def largest(self, report: Callable[[Any], float]) -> float:
        """The largest answer to ``report`` any actor has given so far (a peak that must not fall, as memory)."""
        self._largest[report] = max(self._largest.get(report, 0.0), *self.answers(report).values(), 0.0)
        return self._largest[report]

    def peak_rss_mib(self) -> float:
        """The largest peak resident memory the actors' processes have reported so far, in MiB."""
        return self.largest(_actor_peak_rss_mib)

    def shutdown(self) -> None:
        for actor in self.actors:
            self._ray.kill(actor)


class PoolFront:
    """What each kind of worker pool (rollout, reward, environment) shows of the ActorPool behind it."""

    pool: ActorPool

    @property
    def actors(self) -> list[Any]:
        return self.pool.actors

    @property
    def restarts(self) -> int:
        return self.pool.restarts

    def peak_rss_mib(self) -> float:
        return self.pool.peak_rss_mib()

    def shutdown(self) -> None:
        self.pool.shutdown()
