import json
import math
import random
from collections import Counter

import pytest
import torch

from autotelic.curricula import (
    BanditCurriculum,
    EmptyFamilyError,
    EmptyPoolError,
    PromptPoolCurriculum,
)
from autotelic.curricula.bandit import boltzmann
from autotelic.curricula.regret import (
    informativeness,
    minmax_weights,
    sample_without_replacement,
)
from autotelic.heldout import HeldOut, heldout_tasks
from autotelic.types import Group, Sample, Task

NO_HELDOUT = HeldOut(())


def _task(uid: str, family: str = "add", level: int = 1) -> Task:
    return Task(prompt=f"prompt {uid}", answer="1", family=family, level=level, uid=uid, meta={"source": "test"})


def _group(family: str, level: int, rewards: list[float], dropped_by: str | None = None) -> Group:
    return _group_of(_task(f"{family}:{level}", family, level), rewards, dropped_by)


def _group_of(task: Task, rewards: list[float], dropped_by: str | None = None) -> Group:
    samples = [Sample("x", [1], [0.0], True, reward=r) for r in rewards]
    return Group(task, [1], samples, dropped_by=dropped_by)


# ---- BanditCurriculum: learnability (today's behaviour) ------------------------------------


def test_partly_solved_arms_are_preferred():
    curriculum = BanditCurriculum(["add", "successor"], [1, 2], seed=0, heldout=NO_HELDOUT, value="learnability",
                                  ema=1.0)
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
    curriculum = BanditCurriculum(["add"], [1, 2], seed=0, heldout=NO_HELDOUT, value="learnability", ema=0.5,
                                  prior_pass_rate=0.5)
    metrics = curriculum.observe([_group("add", 1, [1, 1, 1, 1])])
    assert curriculum.pass_rates() == {"add/L1": pytest.approx(0.75), "add/L2": pytest.approx(0.5)}
    assert curriculum.estimated_pass_rate(_task("t", "add", 1)) == pytest.approx(0.75)
    assert curriculum.estimated_pass_rate(_task("t", "compare", 1)) == 0.5  # outside the arms: the prior
    assert metrics["curriculum/value/add/L1"] == pytest.approx(0.75 * 0.25)
    assert metrics["curriculum/value/add/L2"] == pytest.approx(0.25)
    assert {"curriculum/mean_level", "curriculum/entropy"} <= set(metrics)


def test_reward_errors_are_not_evidence():
    curriculum = BanditCurriculum(["add"], [1], seed=0, heldout=NO_HELDOUT, value="sec", ema=1.0, alpha=1.0)
    curriculum.observe([_group("add", 1, [0, 0, 0, 0], dropped_by="reward_error")])
    assert curriculum.pass_rates() == {"add/L1": 0.5}
    assert curriculum.arms[0].q == 0.5 and curriculum.arms[0].pulls == 0


def test_heldout_tasks_are_never_drawn():
    heldout = HeldOut(tuple(heldout_tasks(["add"], [1], 60, seed=1)))
    curriculum = BanditCurriculum(["add"], [1], seed=0, heldout=heldout)
    assert not {t.uid for t in curriculum.next_tasks(300)} & heldout.uids


def test_exhausted_family_and_bad_config_fail_clearly():
    heldout = HeldOut(tuple(heldout_tasks(["add"], [1], 100, seed=1)))  # all 100 single-digit sums
    curriculum = BanditCurriculum(["add"], [1], seed=0, heldout=heldout)
    with pytest.raises(EmptyFamilyError, match="family 'add' level 1 produced only held-out tasks"):
        curriculum.next_tasks(1)
    with pytest.raises(EmptyFamilyError, match="curriculum.families is empty"):
        BanditCurriculum([], [1], seed=0, heldout=NO_HELDOUT)
    with pytest.raises(EmptyFamilyError, match="has any of the levels"):
        BanditCurriculum(["add"], [7], seed=0, heldout=NO_HELDOUT)
    with pytest.raises(ValueError, match="choose one of learnability, sec, uniform"):
        BanditCurriculum(["add"], [1], seed=0, heldout=NO_HELDOUT, value="ucb")


# ---- BanditCurriculum: SEC, Boltzmann, uniform ---------------------------------------------


def test_sec_values_follow_the_td_update_and_unsampled_arms_decay_to_the_prior():
    curriculum = BanditCurriculum(["add"], [1, 2, 3], seed=0, heldout=NO_HELDOUT, value="sec", alpha=0.5, decay=0.2,
                                  prior_value=0.5, temperature=0.1)
    first = curriculum.observe([
        _group("add", 1, [1, 0, 0, 0]),  # mean 0.25: |advantages| 0.75, 0.25, 0.25, 0.25
        _group("add", 1, [1, 1, 0, 0]),  # mean 0.5: |advantages| all 0.5
        _group("add", 2, [1, 1, 1, 1]),  # no advantage at all
    ])
    # L1: r = (0.75 + 3 * 0.25 + 4 * 0.5) / 8 = 0.4375 -> Q = 0.5 * 0.5 + 0.5 * 0.4375
    assert first["curriculum/value/add/L1"] == pytest.approx(0.46875)
    assert first["curriculum/value/add/L2"] == pytest.approx(0.25)
    assert first["curriculum/value/add/L3"] == pytest.approx(0.5)  # unsampled, already at the prior
    second = curriculum.observe([
        _group("add", 1, [1, 0, 1, 1]),  # mean 0.75: r = (0.25 + 0.75 + 0.25 + 0.25) / 4 = 0.375
        _group("add", 2, [0, 0, 0, 0], dropped_by="reward_error"),  # ignored: L2 counts as unsampled
    ])
    assert second["curriculum/value/add/L1"] == pytest.approx(0.5 * 0.46875 + 0.5 * 0.375)
    assert second["curriculum/value/add/L2"] == pytest.approx(0.8 * 0.25 + 0.2 * 0.5)
    assert second["curriculum/value/add/L3"] == pytest.approx(0.5)
    # Boltzmann over Q / temperature, by hand
    weights = [math.exp(4.21875), math.exp(3.0), math.exp(5.0)]
    expected = {f"add/L{level}": w / sum(weights) for level, w in zip([1, 2, 3], weights)}
    assert curriculum.mix() == pytest.approx(expected)
    assert second["curriculum/mean_level"] == pytest.approx(sum(lv * expected[f"add/L{lv}"] for lv in [1, 2, 3]))
    assert second["curriculum/entropy"] == pytest.approx(-sum(p * math.log(p) for p in expected.values()))


def test_boltzmann_by_hand_and_stable_for_large_values():
    e = math.e
    assert boltzmann([0.0, 0.1, 0.2], 0.1) == pytest.approx([1 / (1 + e + e**2), e / (1 + e + e**2), e**2 / (1 + e + e**2)])
    assert boltzmann([1000.0, 0.0], 0.01) == pytest.approx([1.0, 0.0])
    assert boltzmann([0.3, 0.3], 5.0) == [0.5, 0.5]


def test_sec_moves_probability_away_from_a_family_with_all_equal_rewards():
    curriculum = BanditCurriculum(["add", "compare"], [1], seed=0, heldout=NO_HELDOUT, value="sec", temperature=0.1)
    before = curriculum.mix()["add/L1"]
    for _ in range(3):
        curriculum.observe([_group("add", 1, [1, 1, 1, 1]), _group("compare", 1, [1, 0, 1, 0])])
    after = curriculum.mix()
    assert before == pytest.approx(0.5)
    assert after["add/L1"] < 0.2 < 0.8 < after["compare/L1"]


def test_uniform_value_ignores_rewards():
    curriculum = BanditCurriculum(["add", "compare"], [1], seed=0, heldout=NO_HELDOUT, value="uniform", ema=1.0)
    curriculum.observe([_group("add", 1, [1, 0, 1, 0]), _group("compare", 1, [0, 0, 0, 0])])
    assert set(curriculum.mix().values()) == {0.5}
    assert curriculum.pass_rates() == {"add/L1": 0.5, "compare/L1": 0.0}  # still tracked


@pytest.mark.parametrize("through", ["json", "torch"])
def test_bandit_state_round_trip_reproduces_values_and_the_task_stream(through, tmp_path):
    def make(seed: int) -> BanditCurriculum:
        return BanditCurriculum(["add", "compare"], [1, 2], seed=seed, heldout=NO_HELDOUT, value="sec", decay=0.1)

    first = make(3)
    first.observe([_group("add", 1, [1, 0, 0, 0]), _group("compare", 2, [1, 1, 1, 1])])
    first.next_tasks(5)  # the rng has moved on from its seed
    state = first.state_dict()
    if through == "json":
        state = json.loads(json.dumps(state))
    else:
        torch.save(state, tmp_path / "state.pt")
        state = torch.load(tmp_path / "state.pt", weights_only=False)
    expected = [t.uid for t in first.next_tasks(20)]
    second = make(99)
    second.load_state_dict(state)
    assert second.mix() == first.mix() and second.pass_rates() == first.pass_rates()
    assert [arm.pulls for arm in second.arms] == [arm.pulls for arm in first.arms]
    assert [t.uid for t in second.next_tasks(20)] == expected


# ---- informativeness and sampling ----------------------------------------------------------


def test_informativeness_metrics_by_hand():
    rewards = [0.0, 0.5, 1.0, 1.0]  # mean 0.625
    assert informativeness(rewards, "gap") == pytest.approx(1.0)
    assert informativeness(rewards, "regret") == pytest.approx(0.375)
    assert informativeness(rewards, "variance") == pytest.approx((0.625**2 + 0.125**2 + 2 * 0.375**2) / 4)
    # leave-one-out: |0 - 2.5/3| + |0.5 - 2/3| + 2 * |1 - 1.5/3| = 5/6 + 1/6 + 1 = 2, over 4
    assert informativeness(rewards, "loo") == pytest.approx(0.5)
    assert informativeness(rewards, "top2") == 0.0  # two samples share the best reward
    assert informativeness([0.2, 0.9, 0.5], "top2") == pytest.approx(0.4)
    for metric in ("gap", "regret", "variance", "loo", "top2"):
        assert informativeness([1.0], metric) == 0.0
        assert informativeness([0.7, 0.7, 0.7], metric) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="choose one of gap, regret, variance, loo, top2"):
        informativeness(rewards, "entropy")


def test_minmax_weights():
    assert minmax_weights([2.0, 4.0, 3.0]) == [0.0, 1.0, 0.5]
    assert minmax_weights([3.0, 3.0]) == [1.0, 1.0]
    assert minmax_weights([]) == []


def test_sampling_without_replacement_never_repeats_and_leaves_zero_weights_last():
    rng = random.Random(0)
    weights = [0.0, 1.0, 0.0, 2.0, 0.5]
    for _ in range(200):
        assert set(sample_without_replacement(weights, 3, rng)) == {1, 3, 4}
        four = sample_without_replacement(weights, 4, rng)
        assert len(set(four)) == 4 and {1, 3, 4} <= set(four)
        assert sorted(sample_without_replacement(weights, 10, rng)) == [0, 1, 2, 3, 4]  # k capped
    firsts = Counter(sample_without_replacement([1.0, 3.0], 1, rng)[0] for _ in range(4000))
    assert firsts[1] / 4000 == pytest.approx(0.75, abs=0.03)
    with pytest.raises(ValueError, match="non-negative"):
        sample_without_replacement([1.0, -1.0], 1, rng)


# ---- PromptPoolCurriculum ------------------------------------------------------------------


def _scored_pool(**kwargs) -> tuple[PromptPoolCurriculum, dict[str, Task]]:
    tasks = {"wide": _task("wide"), "narrow": _task("narrow", "compare"), "flat": _task("flat")}
    pool = PromptPoolCurriculum(list(tasks.values()), NO_HELDOUT, seed=0, **kwargs)
    pool.observe([
        _group_of(tasks["wide"], [0, 1, 0, 1]),        # gap 1, pass rate 0.5
        _group_of(tasks["narrow"], [0.5, 1, 1, 1]),    # gap 0.5, pass rate 0.875
        _group_of(tasks["flat"], [1, 1, 1, 1]),        # gap 0, pass rate 1
    ])
    return pool, tasks


def test_pool_prefers_the_most_informative_task():
    pool, tasks = _scored_pool()
    counts = Counter(t.uid for _ in range(2000) for t in pool.next_tasks(1))
    assert counts["wide"] > 1.5 * counts["narrow"] > 0 and counts["flat"] == 0  # weights 1 : 0.5 : 0
    for _ in range(50):
        assert {t.uid for t in pool.next_tasks(2)} == {"wide", "narrow"}
    five = [t.uid for t in pool.next_tasks(5)]  # more than the pool: every task once, then repeats
    assert len(five) == 5 and set(five) == {"wide", "narrow", "flat"}
    assert [t.uid for t in pool.top(2)] == ["wide", "narrow"]
    assert pool.mix() == pytest.approx({"add/L1": 2 / 3, "compare/L1": 1 / 3})
    assert pool.estimated_pass_rate(tasks["narrow"]) == 0.875
    assert pool.estimated_pass_rate(_task("unseen")) == 0.5


def test_gate_removes_a_solved_task_and_new_tasks_get_the_best_score():
    pool, _ = _scored_pool(gate=(0.3, 0.8))  # narrow (0.875) and flat (1.0) fall outside
    pool.add([_task("fresh")])
    metrics = pool.observe([])
    assert metrics["curriculum/eligible"] == 2.0 and metrics["curriculum/pool_size"] == 4.0
    drawn = Counter(t.uid for _ in range(200) for t in pool.next_tasks(1))
    assert set(drawn) == {"wide", "fresh"}  # the unseen task shares the top weight
    assert drawn["fresh"] > 50


def test_pool_grows_with_add_and_keeps_known_scores():
    pool, tasks = _scored_pool()
    pool.add([_task("fresh"), _task("wide")])  # "wide" is already there: ignored
    assert len(pool.pool) == 4 and pool.pool["wide"].score == 1.0
    assert "fresh" in {t.uid for t in pool.next_tasks(3)}  # prior = best score: tried early
    assert [t.uid for t in pool.top(10)] == ["wide", "narrow", "flat"]  # only observed tasks


def test_pool_observe_metrics_and_reward_errors():
    tasks = [_task("a"), _task("b")]
    pool = PromptPoolCurriculum(tasks, NO_HELDOUT, seed=0, metric="regret")
    metrics = pool.observe([
        _group_of(tasks[0], [0, 1, 1, 1]),  # regret 0.25
        _group_of(tasks[1], [0, 0, 0, 0], dropped_by="reward_error"),
        _group_of(_task("stranger"), [0, 1]),  # not in the pool: ignored
    ])
    assert metrics == {"curriculum/pool_size": 2.0, "curriculum/eligible": 2.0,
                       "curriculum/mean_informativeness": pytest.approx(0.25),
                       "curriculum/informativeness_zero_share": 0.0, "curriculum/informativeness_distinct": 1.0,
                       "curriculum/informativeness_max": pytest.approx(0.25)}
    assert pool.pool["b"].score is None
    spread = pool.observe([_group_of(tasks[0], [1, 1, 1, 1]), _group_of(tasks[1], [0.2, 0.9, 0.5, 0.5])])
    assert spread["curriculum/informativeness_zero_share"] == 0.5 and spread["curriculum/informativeness_distinct"] == 2


def test_nothing_eligible_fails_clearly():
    pool, _ = _scored_pool(gate=(0.0, 0.2))
    with pytest.raises(EmptyPoolError, match=r"outside the learnability gate \(0.0, 0.2\)"):
        pool.next_tasks(1)
    with pytest.raises(EmptyPoolError, match="the pool is empty"):
        PromptPoolCurriculum([], NO_HELDOUT, seed=0).next_tasks(1)
    with pytest.raises(ValueError, match="unknown informativeness metric 'best'"):
        PromptPoolCurriculum([], NO_HELDOUT, seed=0, metric="best")


def test_pool_state_round_trip_through_json():
    pool, _ = _scored_pool(gate=(0.3, 0.9))
    pool.add([_task("fresh", "compare", 2)])
    pool.next_tasks(3)
    state = json.loads(json.dumps(pool.state_dict()))
    expected = [t.uid for t in pool.next_tasks(20)]
    restored = PromptPoolCurriculum([], NO_HELDOUT, seed=7, gate=(0.3, 0.9))
    restored.load_state_dict(state)
    assert restored.pool == pool.pool  # tasks, scores and pass rates
    assert all(entry.task.meta == {"source": "test"} for entry in restored.pool.values())
    assert [t.uid for t in restored.next_tasks(20)] == expected
