"""One step's rollouts: the four stages composed, each swappable and each timed.

    Replay/curriculum -> tasks -> Control (how many, group sizes) -> Generate -> Filter (score, drop)
    -> [dynamic sampling: again until the batch is full] -> Control (overlong, token budget) -> Replay

The pipeline knows stages only through their small interfaces (a curriculum, a rollout worker, a
scorer, group filters, a budget, a buffer), so a Ray-backed generator or a new filter is a new
piece passed in, never an edit here.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass, field

from autotelic.curricula import Curriculum
from autotelic.rollout.control import (
    Budget,
    adaptive_group_sizes,
    decided,
    mask_truncated,
    overlong_penalty,
    shape_overlong,
)
from autotelic.rollout.filter import (
    FilterStats,
    GroupFilter,
    RewardErrors,
    Scorer,
    apply_filters,
    score_groups,
    select_top_variance,
)
from autotelic.rollout.generate import RolloutWorker
from autotelic.rollout.replay import OnPolicyBuffer, ReplayBuffer
from autotelic.types import SHARE_PREFIX, Group, Task

UNSCORED = ("reward_error", "unscorable")


@dataclass
class StepRollouts:
    groups: list[Group]  # everything generated this step, kept or not (for logs)
    batch: list[Group]  # what the update trains on (fresh kept groups + replayed ones)
    metrics: dict[str, float]


@dataclass
class RolloutPipeline:
    curriculum: Curriculum
    generator: RolloutWorker
    scorer: Scorer
    filters: list[GroupFilter]
    budget: Budget
    replay: OnPolicyBuffer | ReplayBuffer
    dynamic_sampling: bool = False
    max_rounds: int = 3
    keep_top_fraction: float = 1.0
    adaptive_sizes: tuple[int, int] | None = None
    """(min, max) samples per task when group sizes adapt to estimated pass rates."""
    early_exit_probe: int | None = None
    overlong: str = "none"
    overlong_buffer: int = 8
    reward_errors: RewardErrors = RewardErrors()
    _failures: list[str] = field(default_factory=list)  # this step's groups dropped for reward errors (drop mode)
    _times: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def _timed(self, stage: str, started: float) -> float:
        now = time.perf_counter()
        self._times[stage] += now - started
        return now

    def _sizes(self, tasks: list[Task]) -> list[int]:
        if self.adaptive_sizes is None:
            return [self.budget.group_size] * len(tasks)
        low, high = self.adaptive_sizes
        rates = [self.curriculum.estimated_pass_rate(task) for task in tasks]
        return adaptive_group_sizes(rates, self.budget.group_size * len(tasks), low, high)

    def _generate_and_score(self, tasks: list[Task], sizes: list[int], metrics: dict[str, float]) -> list[Group]:
        started = time.perf_counter()
        probe = self.early_exit_probe
        first = [min(probe, n) for n in sizes] if probe else sizes
        groups = self.generator.generate(tasks, first, self.budget.max_new_tokens)
        started = self._timed("generate", started)
        self._failures += score_groups(groups, self.scorer, self.reward_errors)
        started = self._timed("filter", started)
        if not probe:
            return groups
        open_groups = [(g, n - len(g.samples)) for g, n in zip(groups, sizes)
                       if g.kept and n > len(g.samples) and not decided(g)]
        for group, n in zip(groups, sizes):
            if group.kept and n > len(group.samples) and decided(group):
                group.dropped_by = "early_exit"
                metrics["control/early_exit_saved_samples"] += n - len(group.samples)
        if open_groups:
            rest = self.generator.generate([g.task for g, _ in open_groups], [k for _, k in open_groups],
                                           self.budget.max_new_tokens)
            started = self._timed("generate", started)
            for (group, _), more in zip(open_groups, rest):
                group.samples.extend(more.samples)
            # whole groups: votes and judges see all
            self._failures += score_groups([g for g, _ in open_groups], self.scorer, self.reward_errors)
            self._timed("filter", started)
        return groups

    def collect(self, policy_version: int) -> StepRollouts:
        """One step's rollouts, the lifecycle top to bottom: rounds of plan -> generate -> score -> shape ->
        filter -> observe until enough groups are kept (one round unless ``dynamic_sampling``), then the step's
        control (top-variance selection, truncation masks, the token budget) and replay."""
        self._times.clear()
        self._failures.clear()
        metrics: dict[str, float] = defaultdict(float)
        groups: list[Group] = []
        for round_index in range(self.max_rounds if self.dynamic_sampling else 1):
            tasks, sizes = self._plan(groups)
            if not tasks:
                break
            new = self._generate_and_score(tasks, sizes, metrics)
            self._shape_and_filter(new)
            metrics.update(self._observe(new))
            groups.extend(new)
            metrics["filter/rounds"] = round_index + 1.0
            if sum(g.kept for g in groups) >= self.budget.tasks_per_step:
                break
        self.reward_errors.check_step(groups, self._failures)  # before the update: no step trains on too few
        spent = self._control(groups, metrics)
        batch = self._replay(groups, policy_version, metrics)
        metrics.update(self._step_metrics(groups, batch, spent))
        return StepRollouts(groups, batch, dict(metrics))

    def _plan(self, groups: list[Group]) -> tuple[list[Task], list[int]]:
        """Control: how many tasks this round draws (after the first, over-sampled by the keep rate seen so
        far, DAPO's dynamic sampling), within the token and sample budgets left; which tasks; how many samples each."""
        started = time.perf_counter()
        target, kept = self.budget.tasks_per_step, sum(g.kept for g in groups)
        need = target - kept
        if groups:
            keep_rate = max(kept / len(groups), 1 / target)
            need = min(target, math.ceil(need / keep_rate))
        tokens, samples = sum(g.num_completion_tokens for g in groups), sum(len(g.samples) for g in groups)
        count = self.budget.plan(need, tokens, samples)
        tasks = self.curriculum.next_tasks(count) if count else []
        sizes = self._sizes(tasks)
        self._timed("control", started)
        return tasks, sizes

    def _shape_and_filter(self, groups: list[Group]) -> None:
        """Control's overlong shaping of the rewards, then the group filters."""
        started = time.perf_counter()
        if self.overlong == "shaping":
            shape_overlong(groups, self.budget.max_new_tokens, self.overlong_buffer)
        apply_filters(groups, self.filters)
        self._timed("filter", started)

    def _observe(self, groups: list[Group]) -> dict[str, float]:
        """The curriculum learns from the round's scored groups (a group no reward could score tells nothing)."""
        started = time.perf_counter()
        metrics = self.curriculum.observe([g for g in groups if g.dropped_by not in UNSCORED])
        self._timed("replay", started)
        return metrics

    def _control(self, groups: list[Group], metrics: dict[str, float]) -> int:
        """The step's control: the highest-variance share of the groups, truncated samples masked, the token
        budget enforced (returns the tokens spent); filter statistics of the final verdicts."""
        started = time.perf_counter()
        select_top_variance(groups, self.keep_top_fraction)
        if self.overlong == "mask":
            metrics["control/masked_truncated"] = float(mask_truncated([g for g in groups if g.kept]))
        spent = self.budget.enforce(groups)
        stats = FilterStats()
        stats.count(groups)
        metrics.update(stats.as_metrics())
        self._timed("control", started)
        return spent

    def _replay(self, groups: list[Group], policy_version: int, metrics: dict[str, float]) -> list[Group]:
        """Replay: the step's groups join the buffer; the batch is what it hands the update."""
        started = time.perf_counter()
        self.replay.add(groups)
        batch, replay_metrics = self.replay.sample(policy_version)
        metrics.update(replay_metrics)
        self._timed("replay", started)
        return batch

    def _step_metrics(self, groups: list[Group], batch: list[Group], spent: int) -> dict[str, float]:
        samples = [s for g in groups for s in g.samples]
        metrics = {
            "generate/samples": float(len(samples)),
            "generate/tasks": float(len(groups)),
            "control/completion_tokens": float(spent),
            "control/truncated_fraction": sum(not s.finished for s in samples) / max(1, len(samples)),
            "control/mean_completion_length": spent / max(1, len(samples)),
            "control/mean_group_size": len(samples) / max(1, len(groups)),
            "replay/batch_groups": float(len(batch)),
        }
        if self.overlong == "shaping":
            metrics["control/overlong_penalty"] = sum(
                overlong_penalty(len(s.token_ids), self.budget.max_new_tokens, self.overlong_buffer) for s in samples
            ) / max(1, len(samples))
        return {**metrics, **{f"time/{stage}": seconds for stage, seconds in self._times.items()},
                **{f"{SHARE_PREFIX}{arm}": p for arm, p in self.curriculum.mix().items()}}
