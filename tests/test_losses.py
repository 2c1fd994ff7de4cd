"""Loss math against values computed by hand on small tensors."""

import math

import pytest
import torch

from autotelic.algorithms import GRPOSettings, group_advantages, grpo_loss
from autotelic.algorithms.grpo import kl_penalty


def test_group_advantages_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    # group 1: mean 0.25, unbiased std 0.5 -> (0.75, -0.25, -0.25, -0.25) / 0.5; group 2: all zero
    expected = torch.tensor([1.5, -0.5, -0.5, -0.5, 0.0, 0.0, 0.0, 0.0])
    assert torch.allclose(group_advantages(rewards, 4), expected, atol=1e-3)
    assert torch.allclose(group_advantages(rewards, 4, scale=False), torch.tensor([0.75, -0.25, -0.25, -0.25, 0, 0, 0, 0]))


def test_on_policy_loss_is_minus_mean_token_advantage():
    logp = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    adv = torch.tensor([2.0, -1.0])
    loss, stats = grpo_loss(logp, logp.clone(), adv, mask, GRPOSettings())
    # ratio = 1 everywhere: -(2 + 2 - 1) / 3 real tokens
    assert loss.item() == pytest.approx(-1.0)
    assert stats["clip_fraction"] == 0.0 and stats["ratio_mean"] == pytest.approx(1.0)


def test_sequence_mean_aggregation_by_hand():
    logp = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    loss, _ = grpo_loss(logp, logp.clone(), torch.tensor([2.0, -1.0]), mask, GRPOSettings(loss_agg="seq-mean-token-mean"))
    assert loss.item() == pytest.approx(-(2.0 + -1.0) / 2)


def test_clipping_by_hand():
    old = torch.zeros(1, 2)
    new = torch.tensor([[math.log(1.5), math.log(0.5)]])  # ratios 1.5 and 0.5
    mask = torch.ones(1, 2, dtype=torch.bool)
    settings = GRPOSettings(clip_low=0.2, clip_high=0.28)
    pos, pos_stats = grpo_loss(new, old, torch.tensor([1.0]), mask, settings)
    # A > 0: min(1.5, 1.28) = 1.28 and min(0.5, 0.8) = 0.5
    assert pos.item() == pytest.approx(-(1.28 + 0.5) / 2)
    assert pos_stats["clip_fraction"] == pytest.approx(0.5)
    neg, _ = grpo_loss(new, old, torch.tensor([-1.0]), mask, settings)
    # A < 0: min(-1.5, -1.28) = -1.5 and min(-0.5, -0.8) = -0.8
    assert neg.item() == pytest.approx((1.5 + 0.8) / 2)


def test_gradient_vanishes_where_clipped():
    old = torch.zeros(1, 1)
    new = torch.tensor([[math.log(2.0)]], requires_grad=True)
    loss, _ = grpo_loss(new, old, torch.tensor([1.0]), torch.ones(1, 1, dtype=torch.bool), GRPOSettings())
    loss.backward()
    assert new.grad.item() == 0.0


def test_kl_estimators_and_penalty():
    logp, ref = torch.tensor([[-1.0]]), torch.tensor([[-2.0]])
    assert kl_penalty(logp, ref, "k1").item() == pytest.approx(1.0)
    assert kl_penalty(logp, ref, "k3").item() == pytest.approx(math.exp(-1) + 1 - 1)
    loss, stats = grpo_loss(logp, logp.clone(), torch.tensor([0.0]), torch.ones(1, 1, dtype=torch.bool),
                            GRPOSettings(beta=0.5), ref_logprobs_BT=ref)
    assert loss.item() == pytest.approx(0.5 * math.exp(-1))
    assert stats["kl"] == pytest.approx(math.exp(-1))
    with pytest.raises(ValueError, match="needs reference"):
        grpo_loss(logp, logp, torch.tensor([0.0]), torch.ones(1, 1, dtype=torch.bool), GRPOSettings(beta=0.5))


def test_micro_batches_with_batch_normalizer_sum_to_full_batch():
    torch.manual_seed(0)
    logp = torch.randn(4, 5)
    old = logp + 0.1 * torch.randn(4, 5)
    mask = torch.rand(4, 5) > 0.3
    adv = torch.randn(4)
    full, _ = grpo_loss(logp, old, adv, mask, GRPOSettings())
    total = int(mask.sum())
    halves = [grpo_loss(logp[i:i + 2], old[i:i + 2], adv[i:i + 2], mask[i:i + 2], GRPOSettings(), normalizer=total)[0]
              for i in (0, 2)]
    assert (halves[0] + halves[1]).item() == pytest.approx(full.item(), rel=1e-6)
