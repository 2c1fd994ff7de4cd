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
        score_groups(groups, self.scorer)
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
            score_groups([g for g, _ in open_groups], self.scorer)  # whole groups: votes and judges see all
            self._timed("filter", started)
        return groups

    def collect(self, policy_version: int) -> StepRollouts:
        self._times.clear()
        metrics: dict[str, float] = defaultdict(float)
        stats = FilterStats()
        groups: list[Group] = []
        kept = 0
        target = self.budget.tasks_per_step
        rounds = self.max_rounds if self.dynamic_sampling else 1
        spent = 0
        for round_index in range(rounds):
            started = time.perf_counter()
            need = target - kept
            if round_index > 0:  # over-sample by the keep rate seen so far (DAPO's dynamic sampling)
                keep_rate = max(kept / max(1, len(groups)), 1 / target)
                need = min(target, math.ceil(need / keep_rate))
            count = self.budget.plan(need, spent)
            tasks = self.curriculum.next_tasks(count) if count else []
            sizes = self._sizes(tasks)
            self._timed("control", started)
            if not tasks:
                break
            new = self._generate_and_score(tasks, sizes, metrics)
            started = time.perf_counter()
            if self.overlong == "shaping":
                shape_overlong(new, self.budget.max_new_tokens, self.overlong_buffer)
            apply_filters(new, self.filters)
            started = self._timed("filter", started)
            metrics.update(self.curriculum.observe([g for g in new if g.dropped_by not in UNSCORED]))
            self._timed("replay", started)
            groups.extend(new)
            spent += sum(g.num_completion_tokens for g in new)
            kept = sum(g.kept for g in groups)
            metrics["filter/rounds"] = round_index + 1.0
            if kept >= target:
                break
        started = time.perf_counter()
        select_top_variance(groups, self.keep_top_fraction)
        if self.overlong == "mask":
            metrics["control/masked_truncated"] = float(mask_truncated([g for g in groups if g.kept]))
        spent = self.budget.enforce(groups)
        stats.count(groups)
        started = self._timed("control", started)
        self.replay.add(groups)
        batch, replay_metrics = self.replay.sample(policy_version)
        self._timed("replay", started)
        samples = [s for g in groups for s in g.samples]
        if self.overlong == "shaping":
            metrics["control/overlong_penalty"] = sum(
                overlong_penalty(len(s.token_ids), self.budget.max_new_tokens, self.overlong_buffer) for s in samples
            ) / max(1, len(samples))
        metrics.update(stats.as_metrics())
        metrics.update(replay_metrics)
        metrics.update({
            "generate/samples": float(len(samples)),
            "generate/tasks": float(len(groups)),
            "control/completion_tokens": float(spent),
            "control/truncated_fraction": sum(not s.finished for s in samples) / max(1, len(samples)),
            "control/mean_completion_length": spent / max(1, len(samples)),
            "control/mean_group_size": len(samples) / max(1, len(groups)),
            "replay/batch_groups": float(len(batch)),
        })
        metrics.update({f"time/{stage}": seconds for stage, seconds in self._times.items()})
        metrics.update({f"{SHARE_PREFIX}{arm}": p for arm, p in self.curriculum.mix().items()})
        return StepRollouts(groups, batch, dict(metrics))
