"""Divergence: a step whose rewards, loss or gradients are not finite, whose gradient norm jumps far above its
running range, or whose weights come out of the update producing non-finite log-probs, stops the run with one
line (``DivergenceError``): the step, what went wrong, the likely cause, the last good checkpoint and how to
resume. Skipping such a step instead would only postpone the stop: a learning rate that blew one update up
blows the next one up too.

What is checked before the optimizer step (rewards, loss, gradient norm) leaves the weights untouched; only
what the update itself did (the weights) is seen after it: a probe forward on one of the step's samples, so
that weights that turned non-finite are never checkpointed or exported. The lower layers raise plain
``FloatingPointError``s saying what went wrong (update.py's loss, the backend's gradient norm and its
``grad_norm_ceiling``, generation's logits); stopping.py turns any of them into the run's one line. With
``dist.train_workers`` the ranks' own backends refuse a non-finite norm; the spike ceiling is not sent to them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from autotelic.backends.hf import HFPolicy
from autotelic.checks import TrainingError
from autotelic.types import Group

# Healthy runs stay far under this: over the 254 runs archived in bench/results/archives (3,922 updates after
# the warm-up), the largest gradient norm was 5.3x the median of its previous 20 steps.
SPIKE_FACTOR = 100.0
WINDOW = 20  # recent updates the running median is taken over
WARM_UP = 5  # updates before the first spike check: the first gradient norms of a run set no range yet


class DivergenceError(TrainingError):
    """The run diverged: the message names the step, what went wrong, the last good checkpoint and the resume."""


class DivergedWeights(FloatingPointError):
    """The weights of step ``of_step`` produce non-finite values: they must not be checkpointed or exported."""

    def __init__(self, message: str, of_step: int):
        super().__init__(message)
        self.of_step = of_step


class NonFiniteRewards(FloatingPointError):
    """A kept group's rewards are not finite (a user's reward returning None drops its group instead)."""


@dataclass
class GradNormRange:
    """One model's recent gradient norms: the ceiling its next update's norm must stay under."""

    recent: list[float] = field(default_factory=list)

    def ceiling(self) -> float:
        return SPIKE_FACTOR * statistics.median(self.recent) if len(self.recent) >= WARM_UP else math.inf

    def observe(self, norm: float) -> None:
        if norm > 0:  # a batch without signal (equal rewards) has no gradient: a median of 0 would refuse any
            self.recent = [*self.recent, norm][-WINDOW:]


class DivergenceGuard:
    """The checks of each step for every trained agent, and whether the step changed any weights yet.
    Checkpointed (``Stateful``): a resumed run keeps its gradient norms' running range."""

    def __init__(self, agents: list[HFPolicy], lr: float):
        self.agents, self.lr = agents, lr  # the learning rate: what a divergence's line names as its likely cause
        self.ranges = [GradNormRange() for _ in agents]
        self.step = 0
        self._versions: list[int] | None = None  # nothing to compare with before the first step

    def settle(self, done_steps: int) -> None:
        """The agents' weights are those of ``done_steps`` finished steps."""
        self.step, self._versions = done_steps, [agent.version for agent in self.agents]

    def applied(self) -> bool:
        """Whether an optimizer step changed any agent's weights since they were last ``settle``d."""
        return self._versions is not None and [agent.version for agent in self.agents] != self._versions

    @staticmethod
    @contextmanager
    def generating(of_step: int) -> Iterator[None]:
        """Non-finite values while the policy generates: the weights of step ``of_step`` diverged."""
        try:
            yield
        except DivergedWeights:
            raise
        except FloatingPointError as error:
            raise DivergedWeights(str(error), of_step) from error

    def before_update(self, batch: list[Group], done_steps: int) -> None:
        """The step after ``done_steps`` is about to update on ``batch``: its rewards are checked and each
        agent's gradient norm ceiling is set (the backend checks the norm before its optimizer step)."""
        self.settle(done_steps)
        bad = sum(1 for group in batch for reward in group.rewards if not math.isfinite(reward))
        if bad:
            raise NonFiniteRewards(f"{bad} rewards of the kept groups are not finite")
        for agent, norms in zip(self.agents, self.ranges):
            agent.grad_norm_ceiling = norms.ceiling()

    def after_update(self, index: int, batch: list[Group], metrics: dict[str, float]) -> None:
        """Agent ``index`` was updated on ``batch``: its gradient norm joins the range, its weights are probed."""
        if "train/grad_norm" in metrics:
            self.ranges[index].observe(metrics["train/grad_norm"])
        group = batch[0]
        sample = max(group.samples, key=lambda s: len(s.token_ids))
        with torch.no_grad():  # one forward: a small price against checkpointing weights that are all nan
            logprobs, _ = self.agents[index].completion_logprobs([group.prompt_ids], [sample.token_ids], 1)
        if not bool(torch.isfinite(logprobs).all()):
            raise DivergedWeights("the updated model's log-probs are not finite", self.step + 1)

    def state_dict(self) -> dict[str, Any]:
        return {"recent": [norms.recent for norms in self.ranges]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ranges = [GradNormRange(list(recent)) for recent in state["recent"]]
