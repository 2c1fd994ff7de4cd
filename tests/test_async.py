"""Asynchronous rollouts: the producer thread's schedule (staleness bound, pause, errors, retries)."""

from __future__ import annotations

import threading
import time

import pytest

from autotelic.config import ConfigError
from autotelic.loading import load_config
from autotelic.rollout.asynchronous import AsyncRollouts, RolloutThreadError, staleness_metrics
from autotelic.rollout.pipeline import StepRollouts
from autotelic.checks import TrainingError
from autotelic.trainer import Trainer
from autotelic.types import Group, Sample, Task


class Schedule:
    """A trainer's side of the schedule: which step each collect was for, and how many steps were done then."""

    def __init__(self, collect_seconds: float = 0.0, fail_on: int | None = None) -> None:
        self.done = 0
        self.calls: list[tuple[int, int]] = []  # (step collected, steps done at that moment)
        self.collect_seconds, self.fail_on = collect_seconds, fail_on
        self.lock = threading.Lock()

    def collect(self) -> StepRollouts:
        with self.lock:
            step = len(self.calls)
            self.calls.append((step, self.done))
        if step == self.fail_on:
            raise ValueError("reward function crashed")
        time.sleep(self.collect_seconds)
        return StepRollouts([], [], {"step": float(step)})


def _train(ahead: AsyncRollouts, schedule: Schedule, steps: int, update_seconds: float) -> list[float]:
    seen = []
    for _ in range(steps):
        seen.append(ahead.next().metrics["step"])
        time.sleep(update_seconds)
        with schedule.lock:
            schedule.done += 1
        ahead.step_done()
    return seen


@pytest.mark.parametrize("max_ahead", [0, 1, 2])
def test_rollouts_run_ahead_by_at_most_the_bound(max_ahead):
    schedule = Schedule(collect_seconds=0.01)
    ahead = AsyncRollouts(schedule.collect, max_ahead, done_steps=0, last_step=6)
    seen = _train(ahead, schedule, 6, update_seconds=0.05)
    assert ahead.stop() == []
    assert seen == [0, 1, 2, 3, 4, 5]  # in order, each once, and none collected past the last step
    assert len(schedule.calls) == 6
    leads = [step - done for step, done in schedule.calls]
    assert max(leads) == max_ahead  # updates are slower than collects: the producer runs up to the bound


def test_a_failed_update_gets_new_rollouts_and_a_crash_reaches_the_trainer():
    schedule = Schedule()
    ahead = AsyncRollouts(schedule.collect, 1, done_steps=0, last_step=2)
    ahead.next()
    ahead.step_done(trained=False)  # the update failed: the step is retried on the next rollouts
    ahead.next()
    ahead.step_done()
    ahead.next()
    ahead.step_done()
    ahead.stop()
    assert len(schedule.calls) == 3

    crashing = AsyncRollouts(Schedule(fail_on=1).collect, 1, done_steps=0, last_step=4)
    crashing.next()
    crashing.step_done()
    with pytest.raises(RolloutThreadError, match="reward function crashed") as caught:
        crashing.next()
    assert isinstance(caught.value.__cause__, ValueError)


def test_pause_holds_the_producer_and_resume_continues_from_the_queue():
    schedule = Schedule(collect_seconds=0.05)
    ahead = AsyncRollouts(schedule.collect, 2, done_steps=3, last_step=8)
    with ahead.paused() as queued:  # waits for the collect in progress, then none starts
        count = len(schedule.calls)
        time.sleep(0.2)
        assert len(schedule.calls) == count and len(queued) == count
    saved = ahead.stop()
    assert [r.metrics["step"] for r in saved] == list(range(len(saved)))
    resumed = AsyncRollouts(Schedule().collect, 2, done_steps=3, last_step=8, queued=saved)
    assert resumed.next() is saved[0]  # the queue is trained on first, in order
    resumed.stop()


def test_staleness_is_counted_in_updates():
    task = Task("q", "a", "add", 1, "u")
    samples = [Sample(text="", token_ids=[1], logprobs=[0.0], finished=True, policy_version=v) for v in (4, 5)]
    group = Group(task=task, prompt_ids=[1], samples=samples)
    assert staleness_metrics([group], 6) == {"async/staleness_mean": 1.5, "async/staleness_max": 2.0}
    assert staleness_metrics([], 6) == {}


def test_async_settings_that_cannot_work_are_named(tmp_path):
    base = ["model.threads=1", "logging.progress=false", f"logging.runs_dir={tmp_path}"]
    for options, message in [
        (["dist.async_steps=1"], "needs dist.rollout_workers"),
        (["dist.async_steps=-1"], "must be 0"),
        (["dist.async_steps=1", "dist.rollout_workers=1", "filter.rewards=[{name: self_certainty}]"],
         "runs the policy being trained"),
    ]:
        with pytest.raises((ConfigError, TrainingError), match=message):  # a range on load, a combination after
            Trainer(load_config(None, base + options), tmp_path / "x")
