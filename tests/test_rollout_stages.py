import logging
import random

from autotelic.rollout.control import Budget
from autotelic.rollout.filter import (
    ZeroVarianceFilter,
    apply_filters,
    score_groups,
    verifier_reward,
)
from autotelic.rollout.replay import OnPolicyBuffer
from autotelic.tasks import get_family
from autotelic.types import Group, Sample


def _groups(texts_per_group: list[list[str]]) -> list[Group]:
    family, rng = get_family("add"), random.Random(0)
    groups = []
    for texts in texts_per_group:
        task = family.generate(rng, 1)
        texts = [t.replace("ANSWER", task.answer) for t in texts]
        groups.append(Group(task, [1], [Sample(t, [5] * len(t), [0.0] * len(t), finished=len(t) < 10) for t in texts]))
    return groups


def test_verifier_rewards_then_zero_variance_groups_are_dropped_and_counted():
    groups = _groups([["ANSWER", "x"], ["x", "y"], ["ANSWER", "ANSWER"]])
    score_groups(groups, verifier_reward)
    assert [g.rewards for g in groups] == [[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]]
    stats = apply_filters(groups, [ZeroVarianceFilter()])
    assert [g.dropped_by for g in groups] == [None, "zero_variance", "zero_variance"]
    assert stats.as_metrics() == {"filter/kept_groups": 1.0, "filter/dropped_zero_variance": 2.0}
    buffer = OnPolicyBuffer()
    buffer.add(groups)
    assert buffer.sample() == [groups[0]] and buffer.sample() == []


def test_a_raising_reward_function_drops_only_its_group(caplog):
    def fragile(task, completion):
        if completion == "boom":
            raise KeyError("missing field")
        return 1.0 if completion == "ok" else 0.0

    groups = _groups([["ok", "no"], ["boom", "ok"]])
    with caplog.at_level(logging.WARNING):
        score_groups(groups, fragile)
    assert groups[0].kept and groups[1].dropped_by == "reward_error"
    assert "reward function fragile failed" in caplog.text and "KeyError" in caplog.text
    stats = apply_filters(groups, [ZeroVarianceFilter()])
    assert stats.dropped == {"reward_error": 1}


def test_non_finite_rewards_are_errors():
    groups = _groups([["a", "b"]])
    score_groups(groups, lambda task, completion: float("nan"))
    assert groups[0].dropped_by == "reward_error"


def test_budget_caps_tasks_and_tokens():
    budget = Budget(tasks_per_step=8, group_size=4, max_new_tokens=10, max_tokens_per_step=100)
    assert budget.plan() == 2  # 2 tasks x 4 samples x 10 tokens fit in 100
    groups = _groups([["a" * 20, "b" * 20], ["c" * 5, "d" * 5], ["e" * 50, "f"]])
    metrics = budget.enforce(groups)
    assert [g.dropped_by for g in groups] == [None, None, "token_budget"]
    assert metrics["control/completion_tokens"] == 40 + 10 + 51
    assert metrics["control/truncated_fraction"] == 3 / 6
    assert Budget(8, 4, 10).plan() == 8
