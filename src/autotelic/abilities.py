"""Optional abilities of a run's parts. The trainer asks a part for one by type (``isinstance``), so a new
generator, scorer or pool gains checkpointing, weight publishing or restart counting by having the methods."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Stateful(Protocol):
    """Has state a checkpoint must hold for a resume to continue exactly (a curriculum, a replay buffer,
    rollouts paused mid-generation)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@runtime_checkable
class Learns(Stateful, Protocol):
    """A model that trains beside the policy on groups of its own (eva's creator on its rewrites)."""

    def update(self, groups: list[Any]) -> dict[str, float]: ...


@runtime_checkable
class Publishes(Protocol):
    """Generates from its own copies of the weights (Ray rollout workers), which take the policy's on publish."""

    def publish(self, policy: Any) -> None: ...


@runtime_checkable
class Restartable(Protocol):
    """Runs on actors that are replaced when they die; ``restarts`` counts them for the metrics."""

    @property
    def restarts(self) -> int: ...


@runtime_checkable
class ReportsWorkerMemory(Protocol):
    """Runs in worker processes of its own, whose largest peak resident memory (MiB) the metrics report beside the
    driver's."""

    def peak_rss_mib(self) -> float: ...


@runtime_checkable
class HoldsEnvWorkers(Protocol):
    """Rollout workers whose episodes' environments run on their own actors, replaced when they die."""

    def env_restarts(self) -> int: ...

    def env_peak_rss_mib(self) -> float: ...


@runtime_checkable
class Pausing(Protocol):
    """Keeps groups paused mid-generation between steps (partial rollouts)."""

    pending: list[Any]


@runtime_checkable
class ShutsDown(Protocol):
    """Holds processes (Ray actors) to stop when the run ends."""

    def shutdown(self) -> None: ...


def shut_down(parts: Iterable[object]) -> None:
    """Stops the processes of every part that holds some (the others are left as they are)."""
    for part in parts:
        if isinstance(part, ShutsDown):
            part.shutdown()
