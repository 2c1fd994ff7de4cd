"""The four rollout stages' decisions on hand-made groups, and the pipeline that composes them.

The pipeline tests drive the real curriculum and filters with a scripted rollout worker whose
samples are right or wrong by rule, so every decision (rounds, early exits, drops) is known exactly.
Real-model generators are tested in test_generators.py.
"""

import copy
import logging
import math
import random

import pytest

from autotelic.curricula import BanditCurriculum
from autotelic.heldout import HeldOut
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
    RewardErrors,
    MinStdFilter,
    PassRateBand,
    ZeroVarianceFilter,
    apply_filters,
    completion_scorer,
    score_groups,
    select_top_variance,
    verifier_reward,
)
from autotelic.rollout.generate import branch_point
from autotelic.rollout.pipeline import RolloutPipeline
from autotelic.rollout.replay import OnPolicyBuffer, ReplayBuffer
from autotelic.tasks import get_family
from autotelic.types import Group, Sample, Task
from autotelic.user_code import UserCodeError

NO_HELDOUT = HeldOut(())


def _per_sample(fn):
    """A per-completion reward as the group-level scorer the pipeline takes."""
    return completion_scorer(lambda task, completions: [fn(task, c) for c in completions])


def _groups(texts_per_group: list[list[str]]) -> list[Group]:
    family, rng = get_family("add"), random.Random(0)
    groups = []
    for texts in texts_per_group:
        task = family.generate(rng, 1)
        texts = [t.replace("ANSWER", task.answer) for t in texts]
        groups.append(Group(task, [1], [Sample(t, [5] * len(t), [0.0] * len(t), finished=len(t) < 10) for t in texts]))
    return groups


def _rewarded(rewards: list[list[float]], version: int = 0) -> list[Group]:
    task = Task("q", "1", "add", 1, "u")
    return [Group(task, [1], [Sample("x", [5], [0.0], True, reward=r, policy_version=version) for r in rs])
            for rs in rewards]


# ---- Filter ------------------------------------------------------------------------------------
def test_verifier_rewards_then_zero_variance_groups_are_dropped_and_counted():
    groups = _groups([["ANSWER", "x"], ["x", "y"], ["ANSWER", "ANSWER"]])
    score_groups(groups, _per_sample(verifier_reward))
    assert [g.rewards for g in groups] == [[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]]
    apply_filters(groups, [ZeroVarianceFilter()])
    assert [g.dropped_by for g in groups] == [None, "zero_variance", "zero_variance"]
    stats = FilterStats()
    stats.count(groups)
    assert stats.as_metrics() == {"filter/kept_groups": 1.0, "filter/dropped_zero_variance": 2.0}
    buffer = OnPolicyBuffer()
    buffer.add(groups)
    assert buffer.sample(0)[0] == [groups[0]] and buffer.sample(0)[0] == []


def test_a_raising_reward_stops_or_drops_only_its_group_and_nan_marks_it_unscorable(caplog):
    def fragile(task, completion):
        if completion == "boom":
            raise KeyError("missing field")
        return float("nan") if completion == "?" else float(completion == "ok")

    groups = _groups([["ok", "no"], ["boom", "ok"], ["?", "ok"]])
    with pytest.raises(UserCodeError, match=r"reward function <lambda> raised KeyError: 'missing field' on task add"):
        score_groups(groups, _per_sample(fragile))  # stop, by default
    with caplog.at_level(logging.WARNING):
        failures = score_groups(groups, _per_sample(fragile), RewardErrors(drop=True))
    assert [g.dropped_by for g in groups] == [None, "reward_error", "unscorable"]
    assert failures == [r.getMessage().removesuffix("; group dropped") for r in caplog.records]
    assert "reward function <lambda> raised KeyError" in failures[0] and groups[1].task.uid[:20] in failures[0]
    RewardErrors(drop=True, max_dropped_share=1 / 3).check_step(groups, failures)  # one of three: within
    with pytest.raises(UserCodeError, match=r"1 of the step's 3 groups .* filter.max_dropped_share=0.3; the first"):
        RewardErrors(drop=True, max_dropped_share=0.3).check_step(groups, failures)
    apply_filters(groups, [ZeroVarianceFilter()])
    assert [g.dropped_by for g in groups] == [None, "reward_error", "unscorable"]  # the first reason stays


def test_rest_filters_band_and_top_variance_selection():
    groups = _rewarded([[0, 1, 0, 1], [0, 0, 0, 0.1], [1, 1, 1, 0], [0, 0, 1, 1, 1, 1]])
    # stds: 0.5, 0.0433, 0.433, 0.471; pass rates: 0.5, 0.025, 0.75, 0.667
    apply_filters(groups, [MinStdFilter(0.05), PassRateBand(0.3, 0.7)])
    assert [g.dropped_by for g in groups] == [None, "low_std", "pass_rate_band", None]
    again = _rewarded([[0, 1, 0, 1], [0, 0, 0, 0.1], [1, 1, 1, 0], [0, 0, 1, 1, 1, 1]])
    assert select_top_variance(again, 0.5) == 2  # keeps ceil(0.5 * 4) = 2 of highest std
    assert [g.dropped_by for g in again] == [None, "low_value", "low_value", None]
    assert select_top_variance(_rewarded([[0, 1]]), 0.1) == 0  # at least one group stays


# ---- Control -----------------------------------------------------------------------------------
def test_budget_caps_tasks_and_tokens():
    budget = Budget(tasks_per_step=8, group_size=4, max_new_tokens=10, max_tokens_per_step=100)
    assert budget.plan() == 2  # 2 tasks x 4 samples x 10 tokens fit in 100
    assert budget.plan(8, tokens_spent=60) == 1 and budget.plan(8, tokens_spent=61) == 0
    groups = _groups([["a" * 20, "b" * 20], ["c" * 5, "d" * 5], ["e" * 50, "f"]])
    assert budget.enforce(groups) == 40 + 10 + 51
    assert [g.dropped_by for g in groups] == [None, None, "token_budget"]
    assert Budget(8, 4, 10).plan(3) == 3
    samples = Budget(tasks_per_step=8, group_size=4, max_new_tokens=10, max_samples_per_step=20)
    assert samples.plan() == 5 and samples.plan(8, samples_spent=12) == 2 and samples.plan(8, samples_spent=17) == 0


def test_a_sample_cap_stops_dynamic_sampling_at_the_same_samples_as_one_round():
    """control.max_samples_per_step: refills draw only the samples one plain round would (equal budgets)."""
    capped, worker = _pipeline([1, 2], dynamic_sampling=True, max_rounds=10)
    capped.budget = Budget(4, 4, 3, max_samples_per_step=16)
    out = capped.collect(0)
    assert out.metrics["generate/samples"] == 16 and len(worker.calls) == 1
    wider, worker = _pipeline([1, 2], dynamic_sampling=True, max_rounds=10)
    wider.budget = Budget(4, 4, 3, max_samples_per_step=24)
    out = wider.collect(0)
    assert out.metrics["generate/samples"] == 24 and worker.calls[1:] == [[4, 4]]  # one refill, to the cap


def test_adaptive_group_sizes_favour_uncertain_tasks():
    sizes = adaptive_group_sizes([0.5, 0.0, 1.0, 0.3], total=32, low=2, high=16)
    assert sum(sizes) == 32 and all(2 <= s <= 16 for s in sizes)
    assert sizes[0] > sizes[3] > sizes[1] == sizes[2] == 2
    # weights 0.27, 0.02, 0.02, 0.23 -> floor(32 * w / 0.54) = 16, 1->2, 1->2, 13: one too many, taken
    # from the least uncertain task still above the minimum
    assert sizes == [16, 2, 2, 12]
    assert adaptive_group_sizes([0.5] * 4, total=32, low=2, high=16) == [8, 8, 8, 8]
    with pytest.raises(ValueError, match="min_group_size"):
        adaptive_group_sizes([0.5], 8, low=4, high=2)


def test_early_exit_decision_and_overlong_handling():
    decided_group, open_group = _rewarded([[1, 1, 1], [1, 0, 1]])
    assert decided(decided_group) and not decided(open_group)
    assert overlong_penalty(16, max_new_tokens=24, buffer=8) == 0.0
    assert overlong_penalty(20, 24, 8) == pytest.approx(-0.5)
    assert overlong_penalty(24, 24, 8) == pytest.approx(-1.0)
    groups = _groups([["x" * 8, "y" * 20]])  # lengths 8 (finished) and 20 (cut: finished is len < 10)
    score_groups(groups, _per_sample(lambda t, c: 1.0))
    shape_overlong(groups, max_new_tokens=24, buffer=8)
    assert groups[0].rewards == [1.0, 0.5]
    episode = Sample("", [0] * 20, [0.0] * 20, False, reward=1.0, info={"turn_rewards": [0.25, 0.75]})
    shape_overlong([Group(Task("q", "", "add", 1, "add:q"), [0], [episode])], max_new_tokens=24, buffer=8)
    assert episode.reward == 0.5 and episode.info["turn_rewards"] == [0.25, 0.25]  # turn credit sees it too
    assert mask_truncated(groups) == 1
    assert groups[0].samples[0].loss_mask() == [1] * 8 and groups[0].samples[1].loss_mask() == [0] * 20


# ---- Replay ------------------------------------------------------------------------------------
def test_replay_buffer_reuses_informative_groups_within_staleness():
    buffer = ReplayBuffer(capacity=2, max_staleness=2, replay_groups=1, max_reuse=2)
    first = _rewarded([[0, 1, 0, 1], [0, 0, 0, 1], [0, 0, 1, 1, 1, 1]], version=0)  # std 0.5, 0.433, 0.471
    buffer.add(first)
    batch, metrics = buffer.sample(policy_version=0)
    assert batch == first and metrics["replay/replayed_groups"] == 0
    assert [s.group for s in buffer.stored] == [first[0], first[2]]  # capacity 2: the lowest priority left
    fresh = _rewarded([[0, 1]], version=1)
    buffer.add(fresh)
    batch, metrics = buffer.sample(policy_version=1)
    assert batch == [fresh[0], first[0]] and metrics["replay/mean_staleness"] == 1.0
    batch, _ = buffer.sample(policy_version=2)
    assert batch == [first[0]]  # second reuse of the top group
    batch, _ = buffer.sample(policy_version=3)
    assert batch == [fresh[0]]  # first[0] is used up; first[2] is now too stale (3 > 2)
    assert all(group_version > 0 for group_version in [s.group.samples[0].policy_version for s in buffer.stored])


# ---- Generate helpers --------------------------------------------------------------------------
def test_branch_point_is_the_highest_entropy_inner_token():
    assert branch_point([0.1, 0.2, 3.0, 0.5]) == 2
    assert branch_point([9.0, 0.2, 0.1, 5.0]) == 1  # neither the first token nor the last
    assert branch_point([1.0, 2.0]) is None


# ---- the pipeline --------------------------------------------------------------------------
class ScriptedWorker:
    """Answers right or wrong by rule: level 1 always right, level 3 always wrong, level 2 alternating."""

    def __init__(self):
        self.calls: list[list[int]] = []

    def generate(self, tasks, sizes, max_new_tokens):
        sizes = [sizes] * len(tasks) if isinstance(sizes, int) else sizes
        self.calls.append(list(sizes))
        groups = []
        for task, n in zip(tasks, sizes):
            texts = [task.answer if task.level == 1 or (task.level == 2 and i % 2 == 0) else "no" for i in range(n)]
            groups.append(Group(task, [1], [Sample(t, [7] * 3, [-0.5] * 3, True) for t in texts]))
        return groups


def _pipeline(levels, **options) -> tuple[RolloutPipeline, ScriptedWorker]:
    worker = ScriptedWorker()
    curriculum = BanditCurriculum(["add"], levels, seed=0, heldout=NO_HELDOUT)
    options.setdefault("filters", [ZeroVarianceFilter()])
    return RolloutPipeline(curriculum, worker, _per_sample(verifier_reward),
                           budget=Budget(4, 4, 3), replay=OnPolicyBuffer(), **options), worker


def test_dynamic_sampling_refills_the_batch_until_enough_groups_are_kept():
    plain, _ = _pipeline([1, 2])
    dynamic, worker = _pipeline([1, 2], dynamic_sampling=True, max_rounds=10)
    plain_out, out = plain.collect(0), dynamic.collect(0)
    assert len(plain_out.batch) < 4  # some level-1 draws are zero-variance
    assert len(out.batch) >= 4 and all(g.task.level == 2 for g in out.batch)
    assert out.metrics["filter/rounds"] == len(worker.calls) > 1
    assert out.metrics["filter/kept_groups"] == len(out.batch)
    assert out.metrics["filter/dropped_zero_variance"] == len(out.groups) - len(out.batch)
    assert out.metrics["generate/samples"] == 4 * len(out.groups)
    assert {"time/generate", "time/filter", "time/control", "time/replay"} <= set(out.metrics)


def test_early_exit_stops_decided_groups_after_the_probe():
    pipeline, worker = _pipeline([1, 3], early_exit_probe=2)
    out = pipeline.collect(0)
    assert worker.calls == [[2, 2, 2, 2]]  # every probe agreed (levels 1 and 3): no second call
    assert all(g.dropped_by == "early_exit" and len(g.samples) == 2 for g in out.groups)
    assert out.metrics["control/early_exit_saved_samples"] == 8
    mixed, worker = _pipeline([2], early_exit_probe=2, filters=[])
    out = mixed.collect(0)
    assert worker.calls == [[2, 2, 2, 2], [2, 2, 2, 2]]  # level 2 probes disagree: the rest is drawn
    assert all(len(g.samples) == 4 and g.kept for g in out.groups)


def test_adaptive_sizes_follow_the_curriculum_estimates():
    pipeline, worker = _pipeline([1, 2], adaptive_sizes=(1, 8), filters=[])
    for _ in range(3):  # each collect sizes its tasks by the estimates it started with, in the tasks' order
        before = copy.deepcopy(pipeline.curriculum)
        out = pipeline.collect(0)
        expected = adaptive_group_sizes([before.estimated_pass_rate(g.task) for g in out.groups], 16, 1, 8)
        assert worker.calls[-1] == [len(g.samples) for g in out.groups] == expected
    assert any(len(set(sizes)) > 1 for sizes in worker.calls)  # tasks really were sized apart
    sizes_by_level: dict[int, list[int]] = {1: [], 2: []}
    out = pipeline.collect(0)
    for group in out.groups:
        sizes_by_level[group.task.level].append(len(group.samples))
    assert sum(len(g.samples) for g in out.groups) == 16
    # level 1 is always solved (p -> 1): it gets fewer samples than a level-2 task (p = 0.5)
    if sizes_by_level[1] and sizes_by_level[2]:
        assert max(sizes_by_level[1]) < min(sizes_by_level[2])
    assert math.isclose(out.metrics["control/mean_group_size"], 4.0)
