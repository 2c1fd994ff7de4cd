"""Loss and advantage math against values computed by hand on tiny tensors."""

import ast
import math
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

import autotelic.algorithms as algorithms
from autotelic.algorithms import (
    ADVANTAGE_ESTIMATORS,
    ALGORITHMS,
    PolicyLossSettings,
    best_worst_pair,
    dpo_loss,
    get_algorithm,
    grpo_advantages,
    kl_penalty,
    policy_loss,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    rloo_advantages,
    simpo_loss,
    tree_advantages,
)

SQRT3 = math.sqrt(3)
# two groups of different sizes: [1, 0, 0, 1 | 1, 0, 0]
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0])
SIZES = [4, 3]


# --- advantages ------------------------------------------------------------------------------

def test_grpo_advantages_by_hand():
    # group 1: mean 1/2, centred (1/2, -1/2, -1/2, 1/2), unbiased var 4 * 1/4 / 3 = 1/3
    # group 2: mean 1/3, centred (2/3, -1/3, -1/3), unbiased var (4/9 + 1/9 + 1/9) / 2 = 1/3
    # so both divide by std 1/sqrt(3): x * sqrt(3)
    expected = torch.tensor([0.5, -0.5, -0.5, 0.5, 2 / 3, -1 / 3, -1 / 3]) * SQRT3
    assert_close(grpo_advantages(REWARDS, SIZES, eps=0.0), expected)
    # default eps 1e-4 is added to the std: 0.5 / (1/sqrt(3) + 1e-4)
    assert grpo_advantages(REWARDS, SIZES)[0].item() == pytest.approx(0.5 / (1 / SQRT3 + 1e-4))


def test_dr_grpo_only_centres():
    expected = torch.tensor([0.5, -0.5, -0.5, 0.5, 2 / 3, -1 / 3, -1 / 3])
    assert_close(grpo_advantages(REWARDS, SIZES, scale=False), expected)
    assert_close(ADVANTAGE_ESTIMATORS["dr_grpo"](REWARDS, SIZES), expected)
    assert_close(ADVANTAGE_ESTIMATORS["grpo"](REWARDS, SIZES), grpo_advantages(REWARDS, SIZES))


def test_grpo_lone_sample_and_constant_group_get_zero():
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.5, 0.5])
    # group of one -> 0; group (0, 1): centred (-1/2, 1/2), var 1/2 / 1, std 1/sqrt(2); constant -> 0 / eps = 0
    half = 0.5 / (1 / math.sqrt(2) + 1e-4)
    assert_close(grpo_advantages(rewards, [1, 2, 2]), torch.tensor([0.0, -half, half, 0.0, 0.0]))


def test_rloo_leave_one_out_by_hand():
    # group 1: r=1 vs others (0, 0, 1) mean 1/3 -> 2/3; r=0 vs others (1, 0, 1) mean 2/3 -> -2/3
    # group 2: r=1 vs (0, 0) -> 1; r=0 vs (1, 0) -> -1/2
    expected = torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3, 1.0, -0.5, -0.5])
    assert_close(rloo_advantages(REWARDS, SIZES), expected)
    assert_close(rloo_advantages(torch.tensor([3.0, 1.0, 0.0]), [1, 2]), torch.tensor([0.0, 1.0, -1.0]))
    assert_close(ADVANTAGE_ESTIMATORS["rloo"](REWARDS, SIZES), expected)


def test_reinforce_pp_baseline_centres_by_group_then_whitens_across_the_whole_batch():
    # centred as Dr.GRPO: (1/2, -1/2, -1/2, 1/2, 2/3, -1/3, -1/3), mean 0
    # batch unbiased var: (4 * 1/4 + 4/9 + 1/9 + 1/9) / 6 = (5/3) / 6 = 5/18
    std = math.sqrt(5 / 18)  # 0.527046
    expected = torch.tensor([0.5, -0.5, -0.5, 0.5, 2 / 3, -1 / 3, -1 / 3]) / std
    assert_close(reinforce_pp_baseline_advantages(REWARDS, SIZES, eps=0.0), expected)
    # 0.5 / (0.527046 + 1e-4) = 0.948503, where GRPO's per-group std gives 0.866025
    assert ADVANTAGE_ESTIMATORS["reinforce_pp_baseline"](REWARDS, SIZES)[0].item() == pytest.approx(0.948503, abs=1e-6)


def test_reinforce_pp_whitens_the_rewards_across_the_batch_without_a_group_baseline():
    # rewards (1, 0, 0, 1, 1, 0, 0): mean 3/7, unbiased var (3 * (4/7)^2 + 4 * (3/7)^2) / 6 = (84/49) / 6 = 2/7
    expected = (REWARDS - 3 / 7) / math.sqrt(2 / 7)
    assert_close(reinforce_pp_advantages(REWARDS, SIZES, eps=0.0), expected)
    # a group of one still has an advantage, which a group baseline would zero
    assert reinforce_pp_advantages(torch.tensor([1.0, 0.0]), [1, 1])[0].item() > 0
    assert reinforce_pp_baseline_advantages(torch.tensor([1.0, 0.0]), [1, 1]).abs().max().item() == 0


def test_batch_whitening_does_not_blow_rounding_differences_up_to_unit_advantages():
    # rewards equal but for one in the 6th decimal: a std of 5e-7, which eps=1e-8 would turn into advantages near +-1.5
    rewards = torch.tensor([0.5, 0.5 + 1e-6, 0.5, 0.5], dtype=torch.float64)
    for estimator in (reinforce_pp_advantages, reinforce_pp_baseline_advantages):
        assert 0 < estimator(rewards, [4]).abs().max().item() < 0.01


def test_estimators_reject_sizes_that_do_not_tile_the_batch():
    for estimator in ADVANTAGE_ESTIMATORS.values():
        with pytest.raises(ValueError, match="sum to the batch size 7"):
            estimator(REWARDS, [4, 2])
    with pytest.raises(ValueError, match="positive"):
        grpo_advantages(REWARDS, [7, 0])


# Tree: sample 0 root (r=1, 4 tokens) with branches 2 (r=0, 3 tokens) and 3 (r=0, 4 tokens) after
# 2 shared tokens; sample 1 a root without branches (r=0, 3 tokens).
TREE = dict(rewards=[1.0, 0.0, 0.0, 0.0], parents=[None, None, 0, 0], branch_at=[0, 0, 2, 2], lengths=[4, 3, 3, 4])


def test_tree_advantages_by_hand():
    advantages, masks = tree_advantages(**TREE, scale=False)
    # V_0 = mean(1, 0, 0) = 1/3, V_1 = 0, baseline b = (1/3 + 0) / 2 = 1/6
    # root 0: prefix V_0 - b = 1/6, after the branch point 1 - V_0 = 2/3
    # root 1 (no branches): r - b = -1/6 on every token
    # branches: shared prefix masked out with advantage 0, then 0 - V_0 = -1/3
    expected = [[1 / 6, 1 / 6, 2 / 3, 2 / 3], [-1 / 6] * 3, [0.0, 0.0, -1 / 3], [0.0, 0.0, -1 / 3, -1 / 3]]
    for got, want in zip(advantages, expected, strict=True):
        assert got == pytest.approx(want)
    assert masks == [[1, 1, 1, 1], [1, 1, 1], [0, 0, 1], [0, 0, 1, 1]]


def test_tree_advantages_two_levels_deep_by_hand():
    # root 0 (r=1, 4 tokens) branched at 2 into sample 1 (r=0, 4 tokens), itself branched at 3 into sample 2
    # (r=1, 5 tokens); root 3 (r=0, 3 tokens) unbranched
    advantages, masks = tree_advantages([1.0, 0.0, 1.0, 0.0], [None, 0, 1, None], [0, 2, 3, 0], [4, 4, 5, 3],
                                        scale=False)
    # V2 = 1, V1 = mean(0, 1) = 1/2, V0 = mean(1, 0, 1) = 2/3, V3 = 0, b = (2/3 + 0) / 2 = 1/3
    # sample 0: before its children's point V0 - b = 1/3, after it 1 - V0 = 1/3
    # sample 1: its own tokens 2..3 V1 - V0 = -1/6, after its child's point 0 - V1 = -1/2
    # sample 2: its own tokens V2 - V1 = 1/2; sample 3: V3 - b = -1/3
    expected = [[1 / 3] * 4, [0.0, 0.0, -1 / 6, -1 / 2], [0.0, 0.0, 0.0, 1 / 2, 1 / 2], [-1 / 3] * 3]
    for got, want in zip(advantages, expected, strict=True):
        assert got == pytest.approx(want)
    assert masks == [[1, 1, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1, 1], [1, 1, 1]]


def test_tree_advantages_scaled_by_group_std():
    # rewards (1, 0, 0, 0): mean 1/4, unbiased var (9/16 + 3/16) / 3 = 1/4, std 1/2 -> doubled
    advantages, _ = tree_advantages(**TREE, eps=0.0)
    expected = [[1 / 3, 1 / 3, 4 / 3, 4 / 3], [-1 / 3] * 3, [0.0, 0.0, -2 / 3], [0.0, 0.0, -2 / 3, -2 / 3]]
    for got, want in zip(advantages, expected, strict=True):
        assert got == pytest.approx(want)
    advantages, _ = tree_advantages(**TREE)  # default eps 1e-4
    assert advantages[0][0] == pytest.approx((1 / 6) / (0.5 + 1e-4))


def test_tree_advantages_equal_rewards_give_zero():
    advantages, masks = tree_advantages([0.5, 0.5, 0.5], [None, 0, None], [0, 1, 0], [2, 2, 1])
    assert advantages == [[0.0, 0.0], [0.0, 0.0], [0.0]]
    assert masks == [[1, 1], [0, 1], [1]]


def test_tree_advantages_errors():
    with pytest.raises(ValueError, match="sample 1: parent 2 is not an earlier sample"):
        tree_advantages([1.0, 0.0, 0.0], [None, 2, 0], [0, 1, 1], [3, 3, 3])
    with pytest.raises(ValueError, match="sample 2: branch_at 1 lies outside its own or its parent's own tokens"):
        tree_advantages([1.0, 0.0, 0.0], [None, 0, 1], [0, 2, 1], [3, 3, 3])  # before sample 1's own tokens
    with pytest.raises(ValueError, match="sample 2 branches from sample 0 at token 2, its siblings at 1"):
        tree_advantages([1.0, 0.0, 0.0], [None, 0, 0], [0, 1, 2], [3, 3, 3])
    with pytest.raises(ValueError, match="sample 1: branch_at 4"):
        tree_advantages([1.0, 0.0], [None, 0], [0, 4], [3, 5])
    with pytest.raises(ValueError, match="one entry per sample"):
        tree_advantages([1.0, 0.0], [None], [0, 0], [3, 3])


# --- policy gradient -------------------------------------------------------------------------

LOGP = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])
MASK = torch.tensor([[True, True, False], [True, False, False]])


def test_on_policy_loss_is_minus_mean_token_advantage():
    loss, stats = policy_loss(LOGP, LOGP.clone(), torch.tensor([2.0, -1.0]), MASK, PolicyLossSettings())
    # ratio = 1 everywhere: -(2 + 2 - 1) / 3 real tokens
    assert loss.item() == pytest.approx(-1.0)
    assert stats == {"clip_fraction": 0.0, "ratio_mean": pytest.approx(1.0)}


@pytest.mark.parametrize(("loss_agg", "normalizer", "expected"), [
    # per-token losses (ratio 1, A = (3, -1)): [[-3, -3, pad], [1, pad, pad]]
    ("token-mean", None, (-3 - 3 + 1) / 3),
    ("token-mean", 10, (-3 - 3 + 1) / 10),
    ("seq-mean-token-mean", None, (-3 + 1) / 2),  # sequence means (-3, 1)
    ("seq-mean-token-mean", 4, (-3 + 1) / 4),
    ("seq-mean-token-sum-norm", None, (-6 + 1) / (2 * 3)),  # sequence sums (-6, 1) over B * T
    ("seq-mean-token-sum-norm", 10, (-6 + 1) / 10),
])
def test_loss_aggregation_by_hand(loss_agg, normalizer, expected):
    settings = PolicyLossSettings(loss_agg=loss_agg)
    loss, _ = policy_loss(LOGP, LOGP.clone(), torch.tensor([3.0, -1.0]), MASK.int(), settings, normalizer=normalizer)
    assert loss.item() == pytest.approx(expected)


def test_settings_reject_unknown_choices():
    with pytest.raises(ValueError, match="unknown loss_agg 'seq-sum'; choose one of: token-mean, seq-mean-token-mean, "
                                         "seq-mean-token-sum-norm"):
        PolicyLossSettings(loss_agg="seq-sum")
    with pytest.raises(ValueError, match="unknown ratio_level 'segment'"):
        PolicyLossSettings(ratio_level="segment")
    with pytest.raises(ValueError, match="unknown kl_estimator 'k2'"):
        PolicyLossSettings(kl_estimator="k2")


def test_asymmetric_clipping_by_hand():
    old = torch.zeros(1, 2)
    new = torch.tensor([[math.log(1.5), math.log(0.5)]], requires_grad=True)  # ratios 1.5 and 0.5
    mask = torch.ones(1, 2, dtype=torch.bool)
    settings = PolicyLossSettings(clip_low=0.2, clip_high=0.28)  # clip range [0.8, 1.28]
    pos, pos_stats = policy_loss(new, old, torch.tensor([1.0]), mask, settings)
    # A > 0: min(1.5, 1.28) = 1.28 (clipped high) and min(0.5, 0.8) = 0.5
    assert pos.item() == pytest.approx(-(1.28 + 0.5) / 2)
    assert pos_stats["clip_fraction"] == pytest.approx(0.5)
    assert pos_stats["ratio_mean"] == pytest.approx(1.0)
    pos.backward()
    # clipped token: no gradient; the other: d/dlogp of -ratio / 2 = -ratio / 2 = -0.25
    assert_close(new.grad, torch.tensor([[0.0, -0.25]]))
    new.grad = None
    neg, neg_stats = policy_loss(new, old, torch.tensor([-1.0]), mask, settings)
    # A < 0: min(-1.5, -1.28) = -1.5 and min(-0.5, -0.8) = -0.8 (clipped low)
    assert neg.item() == pytest.approx((1.5 + 0.8) / 2)
    assert neg_stats["clip_fraction"] == pytest.approx(0.5)
    neg.backward()
    assert_close(new.grad, torch.tensor([[0.75, 0.0]]))  # d/dlogp of ratio / 2 at ratio 1.5


def test_gspo_sequence_ratio_value_and_gradient():
    old = torch.zeros(1, 3)
    # masked log-ratios 0.2 and -0.1 -> mean 0.05; the padded token's 5.0 must not count
    new = torch.tensor([[0.2, -0.1, 5.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    s = math.exp(0.05)  # 1.051271
    settings = PolicyLossSettings(ratio_level="sequence", loss_agg="seq-mean-token-mean")
    loss, stats = policy_loss(new, old, torch.tensor([2.0]), mask, settings)
    # unclipped: every token carries s, GSPO objective -A * s
    assert loss.item() == pytest.approx(-2.0 * s)
    assert stats["ratio_mean"] == pytest.approx(s) and stats["clip_fraction"] == 0.0
    loss.backward()
    # d(-A * s)/d logp_t = -A * s / |y| for the 2 real tokens = -s
    assert_close(new.grad, torch.tensor([[-s, -s, 0.0]]))
    new.grad = None
    # per-token advantages (2, -1): GSPO-token gives token t the gradient -A_t * s / |y| = (-s, s / 2)
    # (differentiating s itself would spread the mean advantage: -(2 - 1) / 2 * s / 2 on both tokens)
    loss, _ = policy_loss(new, old, torch.tensor([[2.0, -1.0, 0.0]]), mask, settings)
    assert loss.item() == pytest.approx(-(2.0 - 1.0) * s / 2)
    loss.backward()
    assert_close(new.grad, torch.tensor([[-s, s / 2, 0.0]]))


def test_gspo_clips_the_whole_sequence():
    old = torch.zeros(1, 3)
    new = torch.tensor([[0.2, -0.1, 5.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    s = math.exp(0.05)
    gspo = PolicyLossSettings(clip_low=3e-4, clip_high=4e-4, ratio_level="sequence", loss_agg="seq-mean-token-mean")
    loss, stats = policy_loss(new, old, torch.tensor([2.0]), mask, gspo)
    # A > 0 and s > 1 + 4e-4: the clipped value 1.0004 wins, no gradient
    assert loss.item() == pytest.approx(-2.0 * 1.0004)
    assert stats["clip_fraction"] == 1.0
    loss.backward()
    assert_close(new.grad, torch.zeros(1, 3))
    new.grad = None
    loss, stats = policy_loss(new, old, torch.tensor([-1.0]), mask, gspo)
    # A < 0: min(-s, -1.0004) = -s, unclipped; gradient -A * s / 2 on real tokens
    assert loss.item() == pytest.approx(s)
    assert stats["clip_fraction"] == 0.0
    loss.backward()
    assert_close(new.grad, torch.tensor([[s / 2, s / 2, 0.0]]))


def test_per_token_advantages():
    adv_BT = torch.tensor([[1.0, -2.0, 5.0], [0.5, 3.0, 0.0]])
    loss, _ = policy_loss(LOGP, LOGP.clone(), adv_BT, MASK, PolicyLossSettings())
    # masked tokens carry 1, -2 and 0.5: -(1 - 2 + 0.5) / 3
    assert loss.item() == pytest.approx(0.5 / 3)
    with pytest.raises(ValueError, match=r"advantages must have shape \(B,\) or \(B, T\)"):
        policy_loss(LOGP, LOGP, torch.zeros(2, 2), MASK, PolicyLossSettings())


def test_decoupled_importance_weight_is_capped_and_detached():
    proximal = torch.zeros(1, 2)
    new = torch.zeros(1, 2, requires_grad=True)  # ratio to the proximal policy: 1
    behaviour = torch.tensor([[-math.log(3.0), math.log(2.0)]], requires_grad=True)
    mask = torch.ones(1, 2)
    loss, stats = policy_loss(new, proximal, torch.tensor([1.0]), mask, PolicyLossSettings(is_cap=2.0),
                              behaviour_logprobs_BT=behaviour)
    # weights pi_old / pi_behaviour = (3, 0.5) -> capped (2, 0.5): -(2 + 0.5) / 2
    assert loss.item() == pytest.approx(-1.25)
    assert stats["is_weight_mean"] == pytest.approx(1.25)
    loss.backward()
    assert_close(new.grad, torch.tensor([[-1.0, -0.25]]))  # -weight * A / 2
    assert behaviour.grad is None


def test_kl_estimators_and_penalty():
    logp, ref = torch.tensor([[-1.0]]), torch.tensor([[-2.0]])
    # log(ref / pi) = -1: k1 = 1, k3 = e^-1 - (-1) - 1 = e^-1
    assert kl_penalty(logp, ref, "k1").item() == pytest.approx(1.0)
    assert kl_penalty(logp, ref, "k3").item() == pytest.approx(math.exp(-1))
    with pytest.raises(ValueError, match="unknown kl_estimator 'k2'"):
        kl_penalty(logp, ref, "k2")
    mask = torch.ones(1, 1, dtype=torch.bool)
    for estimator, kl in (("k1", 1.0), ("k3", math.exp(-1))):
        loss, stats = policy_loss(logp, logp.clone(), torch.tensor([0.0]), mask,
                                  PolicyLossSettings(beta=0.5, kl_estimator=estimator), ref_logprobs_BT=ref)
        assert loss.item() == pytest.approx(0.5 * kl)
        assert stats["kl"] == pytest.approx(kl)
    with pytest.raises(ValueError, match="needs reference"):
        policy_loss(logp, logp, torch.tensor([0.0]), mask, PolicyLossSettings(beta=0.5))


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_the_kl_penalty_pulls_towards_the_reference_in_expectation(estimator):
    """Over pi's own samples (both tokens, weighted by pi), the penalty's expected gradient on the logits: k1's is
    that of KL(pi || pi_ref); k3's that of KL(pi_ref || pi) (GRPO's). Both point the same way here; the plain
    log-ratio as a loss term had expected gradient 0."""
    logits = torch.zeros(2, requires_grad=True)
    ref = torch.log(torch.tensor([0.9, 0.1]))
    pi = torch.softmax(logits, 0).detach()
    expected = torch.zeros(2)
    for token in range(2):
        logp = torch.log_softmax(logits, 0)
        (grad,) = torch.autograd.grad(kl_penalty(logp[token:token + 1], ref[token:token + 1], estimator).sum(), logits)
        expected += pi[token] * grad
    exact = torch.log_softmax(logits, 0)
    if estimator == "k1":
        kl = (exact.exp() * (exact - ref)).sum()
    else:
        kl = (ref.exp() * (ref - exact)).sum()
    (truth,) = torch.autograd.grad(kl, logits)
    assert_close(expected, truth, atol=1e-6, rtol=1e-5)
    assert expected[0] < 0 < expected[1]  # more mass on the reference's likely token


@pytest.mark.parametrize("loss_agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("ratio_level", ["token", "sequence"])
def test_micro_batches_with_batch_normalizer_sum_to_full_batch(loss_agg, ratio_level):
    torch.manual_seed(0)
    B, T = 4, 5
    logp = torch.randn(B, T, requires_grad=True)
    old = logp.detach() + 0.1 * torch.randn(B, T)
    behaviour = old + 0.1 * torch.randn(B, T)
    ref = old + 0.1 * torch.randn(B, T)
    mask = torch.rand(B, T) > 0.3
    adv = torch.randn(B)
    settings = PolicyLossSettings(ratio_level=ratio_level, loss_agg=loss_agg, beta=0.1)
    extra = dict(ref_logprobs_BT=ref, behaviour_logprobs_BT=behaviour)
    full, _ = policy_loss(logp, old, adv, mask, settings, **extra)
    (full_grad,) = torch.autograd.grad(full, logp)
    normalizer = {"token-mean": int(mask.sum()), "seq-mean-token-mean": B, "seq-mean-token-sum-norm": B * T}[loss_agg]
    parts = [policy_loss(logp[i:i + 2], old[i:i + 2], adv[i:i + 2], mask[i:i + 2], settings, normalizer=normalizer,
                         ref_logprobs_BT=ref[i:i + 2], behaviour_logprobs_BT=behaviour[i:i + 2])[0] for i in (0, 2)]
    (parts_grad,) = torch.autograd.grad(parts[0] + parts[1], logp)
    assert (parts[0] + parts[1]).item() == pytest.approx(full.item(), rel=1e-6)
    assert_close(parts_grad, full_grad)


# --- DPO -------------------------------------------------------------------------------------

# pair 1: chosen +1 over ref, rejected -1 -> margin of log-ratios 2; pair 2: chosen -1, rejected 0 -> -1
PC, PR = torch.tensor([-1.0, -5.0]), torch.tensor([-3.0, -4.0])
RC, RR = torch.tensor([-2.0, -4.0]), torch.tensor([-2.0, -4.0])


def test_dpo_loss_and_stats_by_hand():
    pc = PC.clone().requires_grad_()
    loss, stats = dpo_loss(pc, PR, RC, RR, beta=0.5)
    # beta * margins (1, -0.5): -logsigmoid(1) = log(1 + e^-1) = 0.313262, -logsigmoid(-0.5) = log(1 + e^0.5) = 0.974077
    assert loss.item() == pytest.approx((0.313262 + 0.974077) / 2, abs=1e-6)
    # implicit rewards: chosen (0.5, -0.5), rejected (-0.5, 0)
    assert stats == pytest.approx({"reward_accuracy": 0.5, "reward_margin": 0.25, "chosen_reward": 0.0,
                                   "rejected_reward": -0.25})
    loss.backward()
    # d/d pc of -logsigmoid(beta m) / B = -beta * (1 - sigmoid(beta m)) / 2: sigmoid(1) = 0.731059, sigmoid(-0.5) = 0.377541
    assert_close(pc.grad, torch.tensor([-0.5 * 0.268941 / 2, -0.5 * 0.622459 / 2]), atol=1e-6, rtol=0)
    normalized, _ = dpo_loss(PC, PR, RC, RR, beta=0.5, normalizer=4)
    assert normalized.item() == pytest.approx((0.313262 + 0.974077) / 4, abs=1e-6)


def test_simpo_loss_is_reference_free_on_mean_logprobs_with_a_target_margin():
    pc = PC.clone().requires_grad_()
    loss, stats = simpo_loss(pc, PR, beta=2.0, gamma=1.0)
    # beta * (chosen - rejected) = (4, -2); minus gamma (3, -3): -logsigmoid(3) = 0.048587, -logsigmoid(-3) = 3.048587
    assert loss.item() == pytest.approx((0.048587 + 3.048587) / 2, abs=1e-6)
    assert stats == pytest.approx({"reward_accuracy": 0.5, "reward_margin": 1.0, "chosen_reward": -6.0,
                                   "rejected_reward": -7.0})
    loss.backward()  # d/d pc = -beta * sigmoid(-(m - gamma)) / B: sigmoid(-3) = 0.047426, sigmoid(3) = 0.952574
    assert_close(pc.grad, torch.tensor([-2.0 * 0.047426 / 2, -2.0 * 0.952574 / 2]), atol=1e-6, rtol=0)


def test_dpo_label_smoothing():
    loss, _ = dpo_loss(PC, PR, RC, RR, beta=0.5, label_smoothing=0.1)
    # x = 1: 0.9 * 0.313262 + 0.1 * log(1 + e^1) (1.313262) = 0.413262
    # x = -0.5: 0.9 * 0.974077 + 0.1 * log(1 + e^-0.5) (0.474077) = 0.924077
    assert loss.item() == pytest.approx((0.413262 + 0.924077) / 2, abs=1e-6)
    with pytest.raises(ValueError, match="label_smoothing"):
        dpo_loss(PC, PR, RC, RR, label_smoothing=0.5)


def test_best_worst_pair():
    assert best_worst_pair([0.2, 1.0, 0.0, 1.0, 0.0]) == (1, 2)  # first occurrences
    assert best_worst_pair([0.5, 0.5, 0.5]) is None
    assert best_worst_pair([0.0, 0.05], min_gap=0.1) is None
    assert best_worst_pair([0.0, 0.05], min_gap=0.05) == (1, 0)
    assert best_worst_pair([]) is None


# --- registry --------------------------------------------------------------------------------

def test_registry_entries_are_consistent():
    assert list(ALGORITHMS) == ["grpo", "dr_grpo", "dapo", "gspo", "rloo", "reinforce_pp", "reinforce_pp_baseline",
                                "spiral", "online_dpo", "offline_dpo"]
    for name, spec in ALGORITHMS.items():
        assert spec.name == name and spec.source
        if spec.kind == "policy_gradient":
            assert spec.advantage in ADVANTAGE_ESTIMATORS or spec.advantage == "rae"  # rae: update.RoleBaselines
            PolicyLossSettings(clip_low=spec.clip_low, clip_high=spec.clip_high, ratio_level=spec.ratio_level,
                               loss_agg=spec.loss_agg)  # validates the choices
        else:
            assert spec.kind == "dpo" and spec.advantage is None
    gspo = get_algorithm("gspo")
    assert (gspo.ratio_level, gspo.loss_agg, gspo.clip_low, gspo.clip_high) == ("sequence", "seq-mean-token-mean", 3e-4, 4e-4)
    assert get_algorithm("dapo").clip_high == 0.28
    assert get_algorithm("dr_grpo").loss_agg == "seq-mean-token-sum-norm"


def test_get_algorithm_unknown():
    with pytest.raises(ValueError, match="unknown algorithm.name 'ppo'; available: grpo, dr_grpo, dapo, gspo"):
        get_algorithm("ppo")


def test_algorithms_import_no_framework_code():
    allowed = {"__future__", "collections", "dataclasses", "functools", "math", "statistics", "torch", "typing"}
    for path in Path(algorithms.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            for name in names:
                framework_free = ("autotelic.algorithms", "autotelic.types", "autotelic.registry")  # stdlib only
                assert name.split(".")[0] in allowed or name.startswith(framework_free), f"{path.name} imports {name}"
