"""Asynchronous rollouts: the next steps' rollouts are collected while the trainer updates.

A producer thread runs the pipeline's ``collect`` for step s once the trainer has finished step
s - 1 - max_ahead, with the newest weights published by then: every batch is at most ``max_ahead``
steps behind the policy that trains on it (the staleness bound), and the loss corrects its tokens with
their recorded sampling log-probs (``algorithm.off_policy``: clipped ratio, or decoupled with a capped
importance weight). ``max_ahead=0`` is the synchronous schedule.

Generation must not run on the trainer's own model, which changes under the thread: the rollouts come
from workers that load published weights (``dist.rollout_workers``).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from typing import Any

from autotelic.abilities import Publishes
from autotelic.backends import PolicyBackend
from autotelic.errors import TrainingError
from autotelic.rollout.pipeline import RolloutPipeline, StepRollouts
from autotelic.types import Group


class RolloutThreadError(RuntimeError):
    """The producer thread failed; the trainer re-raises it with the original error chained."""


class AsyncRollouts:
    def __init__(self, collect: Callable[[], StepRollouts], max_ahead: int, done_steps: int, last_step: int,
                 queued: list[StepRollouts] | None = None) -> None:
        if max_ahead < 0:
            raise ValueError(f"max_ahead must be 0 or more, got {max_ahead}")
        self._collect, self.max_ahead, self._last_step = collect, max_ahead, last_step
        self._ready: deque[StepRollouts] = deque(queued or [])
        self._done = done_steps  # steps the trainer has finished
        self._next = done_steps + len(self._ready)  # the step whose rollouts are collected next
        self._error: BaseException | None = None
        self._busy = self._paused = self._stopped = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._produce, name="async-rollouts", daemon=True)
        self._thread.start()

    def _may_collect(self) -> bool:
        return not self._paused and self._next < self._last_step and self._next - self._done <= self.max_ahead

    def _produce(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._stopped or self._may_collect())
                if self._stopped:
                    return
                self._busy = True
            try:
                rollouts = self._collect()
            except BaseException as error:  # handed to the trainer, which stops the run with it
                with self._changed:
                    self._error, self._busy = error, False
                    self._changed.notify_all()
                return
            with self._changed:
                self._ready.append(rollouts)
                self._next += 1
                self._busy = False
                self._changed.notify_all()

    def next(self) -> StepRollouts:
        """The rollouts of the trainer's next step (waits for them)."""
        with self._changed:
            self._changed.wait_for(lambda: self._ready or self._error is not None)
            if not self._ready and isinstance(self._error, TrainingError):  # one line, as from the trainer's thread
                raise self._error
            if not self._ready:
                raise RolloutThreadError(f"collecting rollouts failed: {self._error}") from self._error
            return self._ready.popleft()

    def step_done(self, trained: bool = True) -> None:
        """The trainer finished a step with the rollouts of ``next`` and published its weights: one more step
        may be collected. A failed update (``trained=False``) is retried on new rollouts, one more to collect."""
        with self._changed:
            self._done += 1
            self._last_step += not trained
            self._changed.notify_all()

    @contextmanager
    def paused(self) -> Iterator[list[StepRollouts]]:
        """No collect runs inside: the curriculum and replay state are consistent with the yielded queue
        of collected but untrained rollouts, so a checkpoint can save all three."""
        with self._changed:
            self._paused = True
            self._changed.wait_for(lambda: not self._busy)
        try:
            yield list(self._ready)
        finally:
            with self._changed:
                self._paused = False
                self._changed.notify_all()

    def stop(self) -> list[StepRollouts]:
        """Stop after the collect in progress (if any); returns the rollouts never trained on."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()
        self._thread.join()
        return list(self._ready)


class RolloutSchedule:
    """Where each training step's rollouts come from: collected by the pipeline when the step asks, or, with
    ``async_steps`` > 0, by an ``AsyncRollouts`` thread ahead of the trainer. Rollout workers that hold their
    own weights (``Publishes``) take the policy's before each collection."""

    def __init__(self, pipeline: RolloutPipeline, policy: PolicyBackend, generation: Any, async_steps: int,
                 last_step: int) -> None:
        self.pipeline, self.policy, self.generation = pipeline, policy, generation
        self.async_steps, self.last_step = async_steps, last_step
        self.ahead: AsyncRollouts | None = None
        self.queued: list[StepRollouts] = []  # collected ahead but not trained on (from a checkpoint, or stopped)

    def publish(self) -> None:
        if isinstance(self.pipeline.generator, Publishes):
            self.pipeline.generator.publish(self.policy)

    def next(self, done_steps: int) -> tuple[StepRollouts, dict[str, float]]:
        """The next step's rollouts and their metrics (how stale they are, when collected ahead)."""
        if not self.async_steps:
            self.publish()
            rollouts = self.pipeline.collect(self.policy.version)
            if self.generation is not self.policy:  # vllm.sleep: the engine frees the GPU for the update
                self.generation.sleep()
            return rollouts, dict(rollouts.metrics)
        if self.ahead is None:
            self.publish()
            self.ahead = AsyncRollouts(lambda: self.pipeline.collect(self.policy.version), self.async_steps,
                                       done_steps, self.last_step, self.queued)
        rollouts = self.ahead.next()
        return rollouts, {**rollouts.metrics, **staleness_metrics(rollouts.batch, self.policy.version)}

    def step_done(self, trained: bool) -> None:
        if self.ahead is not None:  # the next rollouts may start, from the new weights
            self.publish()
            self.ahead.step_done(trained)

    @contextmanager
    def paused(self) -> Iterator[list[StepRollouts]]:
        """The rollouts collected but not trained on, with no collection running (what a checkpoint saves)."""
        if self.ahead is None:
            yield self.queued
            return
        with self.ahead.paused() as queued:
            yield queued

    def stop(self) -> None:
        """Stops collecting ahead; what was collected but not trained on stays in ``queued``."""
        if self.ahead is not None:
            self.queued, self.ahead = self.ahead.stop(), None


def staleness_metrics(batch: list[Group], policy_version: int) -> dict[str, float]:
    """How many updates old the trained samples were when trained on (before this step's update)."""
    ages = [policy_version - s.policy_version for g in batch for s in g.samples]
    if not ages:
        return {}
    return {"async/staleness_mean": sum(ages) / len(ages), "async/staleness_max": float(max(ages))}
