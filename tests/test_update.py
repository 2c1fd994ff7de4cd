"""From groups to loss inputs: the algorithm's settings, advantages, masks and preference pairs."""

import pytest

from autotelic.algorithms import get_algorithm
from autotelic.config import AlgorithmConfig
from autotelic.types import Group, Sample, Task
from autotelic.update import _normalizer, _targets, loss_settings, rollout_pairs

TASK = Task("q", "1", "add", 1, "u")


def _sample(reward, length=3, mask=None, parent=None, branch_at=0):
    return Sample("x", [5] * length, [0.0] * length, True, reward=reward, mask=mask, parent=parent,
                  branch_at=branch_at)


def test_config_values_override_the_algorithms_own():
    gspo = loss_settings(get_algorithm("gspo"), AlgorithmConfig(name="gspo"))
    assert (gspo.clip_low, gspo.clip_high, gspo.ratio_level, gspo.loss_agg) == (3e-4, 4e-4, "sequence",
                                                                                 "seq-mean-token-mean")
    dapo = loss_settings(get_algorithm("dapo"), AlgorithmConfig(name="dapo", clip_low=0.1, loss_agg="seq-mean-token-mean"))
    assert (dapo.clip_low, dapo.clip_high, dapo.loss_agg) == (0.1, 0.28, "seq-mean-token-mean")


def test_advantages_per_sample_and_masks_from_observations():
    groups = [Group(TASK, [1], [_sample(1.0), _sample(0.0, mask=[1, 0, 1])]),
              Group(TASK, [1], [_sample(0.0), _sample(0.0), _sample(1.0)])]
    rloo = _targets(groups, get_algorithm("rloo"))
    assert rloo.advantages == pytest.approx([1.0, -1.0, -0.5, -0.5, 1.0])
    assert rloo.masks == [[1, 1, 1], [1, 0, 1], [1, 1, 1], [1, 1, 1], [1, 1, 1]]
    assert _normalizer(rloo.masks, "token-mean", 24) == 14
    assert _normalizer(rloo.masks, "seq-mean-token-mean", 24) == 5
    assert _normalizer(rloo.masks, "seq-mean-token-sum-norm", 24) == 5 * 24


def test_tree_groups_get_per_token_advantages_and_prefix_masks_times_own_masks():
    root = _sample(1.0, length=4)
    branch = _sample(0.0, length=4, mask=[1, 1, 1, 0], parent=0, branch_at=2)
    lone = _sample(0.0, length=2)
    targets = _targets([Group(TASK, [1], [root, branch, lone])], get_algorithm("dr_grpo"))
    # V_root = 0.5, V_lone = 0, baseline 0.25; no std scaling for Dr.GRPO
    expected = [[0.25, 0.25, 0.5, 0.5], [0, 0, -0.5, -0.5], [-0.25, -0.25]]
    assert [row == pytest.approx(want) for row, want in zip(targets.advantages, expected)] == [True] * 3
    assert targets.masks == [[1, 1, 1, 1], [0, 0, 1, 0], [1, 1]]


def test_online_dpo_pairs_the_best_and_worst_sample_of_each_group():
    best, worst = _sample(1.0, mask=[1, 0, 1]), _sample(-1.0)
    groups = [Group(TASK, [7], [_sample(0.0), best, worst]), Group(TASK, [8], [_sample(1.0), _sample(1.0)])]
    pairs = rollout_pairs(groups)
    assert len(pairs) == 1  # equal rewards give no preference
    assert pairs[0].prompt_ids == [7] and pairs[0].chosen_mask == [1, 0, 1] and pairs[0].rejected_mask == [1, 1, 1]


def test_micro_batches_keep_groups_whole_within_the_group_and_token_limits():
    from autotelic.types import Group, Sample, Task
    from autotelic.update import micro_batches

    def group(prompt: int, lengths: list[int]) -> Group:
        return Group(Task("", "", "add", 1, "u"), [0] * prompt, [Sample("", [1] * n, [0.0] * n, True) for n in lengths])

    groups = [group(10, [5, 20]), group(10, [30, 0]), group(50, [100]), group(5, [1, 1])]
    costs = [10 + 2 * 20, 10 + 2 * 30, 50 + 100, 5 + 2]  # prompt + samples x the longest completion
    assert [len(b) for b in micro_batches(groups, 8, None)] == [4]
    assert [len(b) for b in micro_batches(groups, 3, None)] == [3, 1]
    assert micro_batches(groups, 8, costs[0] + costs[1]) == [groups[:2], [groups[2]], [groups[3]]]
    assert micro_batches(groups, 8, costs[2] + costs[3]) == [groups[:2], groups[2:]]  # a limit is inclusive
    assert micro_batches(groups, 8, 100) == [[groups[0]], [groups[1]], [groups[2]], [groups[3]]]  # too big alone: alone
