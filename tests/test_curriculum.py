import pytest

from autotelic.curricula.learnability import EmptyFamilyError, LearnabilityCurriculum
from autotelic.evaluate import heldout_tasks
from autotelic.types import Group, Sample, Task


def _group(family: str, level: int, rewards: list[float]) -> Group:
    task = Task(prompt="p", answer="1", family=family, level=level, uid=f"{family}:{level}")
    return Group(task, [1], [Sample("x", [1], [0.0], True, reward=r) for r in rewards])


def test_partly_solved_arms_are_preferred():
    curriculum = LearnabilityCurriculum(["add", "successor"], [1, 2], seed=0, ema=1.0)
    curriculum.observe([
        _group("add", 1, [1, 1, 1, 1]),       # mastered
        _group("add", 2, [1, 0, 1, 0]),       # partly right: the frontier
        _group("successor", 1, [0, 0, 0, 0]),  # hopeless for now
        _group("successor", 2, [0, 0, 0, 1]),
    ])
    mix = curriculum.mix()
    assert mix["add/L2"] > mix["successor/L2"] > mix["add/L1"]
    assert mix["add/L1"] == pytest.approx(mix["successor/L1"])
    drawn = curriculum.next_tasks(400)
    share = sum(t.family == "add" and t.level == 2 for t in drawn) / len(drawn)
    assert share > 0.5


def test_pass_rate_is_a_running_average_and_untried_arms_keep_the_prior():
    curriculum = LearnabilityCurriculum(["add"], [1, 2], seed=0, ema=0.5, prior_pass_rate=0.5)
    curriculum.observe([_group("add", 1, [1, 1, 1, 1])])
    rates = {arm.key: arm.pass_rate for arm in curriculum.arms}
    assert rates == {"add/L1": pytest.approx(0.75), "add/L2": pytest.approx(0.5)}


def test_uniform_strategy_ignores_rewards():
    curriculum = LearnabilityCurriculum(["add", "compare"], [1], seed=0, strategy="uniform", ema=1.0)
    curriculum.observe([_group("add", 1, [1, 0, 1, 0]), _group("compare", 1, [0, 0, 0, 0])])
    assert set(curriculum.mix().values()) == {0.5}


def test_heldout_tasks_are_never_drawn():
    exclude = {t.uid for t in heldout_tasks(["add"], [1], 60, seed=1)}
    curriculum = LearnabilityCurriculum(["add"], [1], seed=0, exclude=exclude)
    assert not {t.uid for t in curriculum.next_tasks(300)} & exclude


def test_exhausted_family_and_empty_config_fail_clearly():
    exclude = {t.uid for t in heldout_tasks(["add"], [1], 100, seed=1)}  # all 100 single-digit sums
    curriculum = LearnabilityCurriculum(["add"], [1], seed=0, exclude=exclude)
    with pytest.raises(EmptyFamilyError, match="family 'add' level 1 produced only held-out tasks"):
        curriculum.next_tasks(1)
    with pytest.raises(EmptyFamilyError, match="curriculum.families is empty"):
        LearnabilityCurriculum([], [1], seed=0)
    with pytest.raises(EmptyFamilyError, match="has any of the levels"):
        LearnabilityCurriculum(["add"], [7], seed=0)


def test_state_round_trip_reproduces_the_task_stream():
    first = LearnabilityCurriculum(["add", "compare"], [1, 2], seed=3)
    first.observe([_group("add", 1, [1, 0, 0, 0])])
    state = first.state_dict()
    expected = [t.uid for t in first.next_tasks(20)]
    second = LearnabilityCurriculum(["add", "compare"], [1, 2], seed=99)
    second.load_state_dict(state)
    assert [t.uid for t in second.next_tasks(20)] == expected
