"""Direct preference optimisation on (chosen, rejected) pairs, offline or from online rollouts.

Inputs are SEQUENCE log-probabilities, shape (B,): sums over each completion's trained tokens for DPO, their
means for SimPO (which has no reference model).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


def dpo_loss(
    policy_chosen_B: torch.Tensor,
    policy_rejected_B: torch.Tensor,
    ref_chosen_B: torch.Tensor,
    ref_rejected_B: torch.Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Sigmoid DPO (Rafailov et al. 2023) with conservative label smoothing (cDPO).

    With implicit rewards beta * (log pi - log pi_ref) and margin m = chosen - rejected reward:
    loss = -(1 - ls) * logsigmoid(m) - ls * logsigmoid(-m), i.e. the preference label is trusted
    with probability 1 - ls (ls < 0.5). Summed and divided by ``normalizer`` (the whole batch's pair
    count, so micro-batches accumulate to the full batch) or by B.
    """
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must lie in [0, 0.5), got {label_smoothing}")
    chosen_reward_B = beta * (policy_chosen_B - ref_chosen_B)
    rejected_reward_B = beta * (policy_rejected_B - ref_rejected_B)
    margin_B = chosen_reward_B - rejected_reward_B
    losses_B = -(1 - label_smoothing) * F.logsigmoid(margin_B) - label_smoothing * F.logsigmoid(-margin_B)
    return _mean_loss(losses_B, normalizer), _stats(chosen_reward_B, rejected_reward_B)


def simpo_loss(
    policy_chosen_B: torch.Tensor,
    policy_rejected_B: torch.Tensor,
    beta: float = 2.0,
    gamma: float = 1.0,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """SimPO (Meng et al. 2024): reference-free, on MEAN token log-probs (length-normalised, so a longer answer is
    not preferred for its length); loss = -logsigmoid(beta * (chosen - rejected) - gamma), gamma a target margin."""
    chosen_reward_B, rejected_reward_B = beta * policy_chosen_B, beta * policy_rejected_B
    losses_B = -F.logsigmoid(chosen_reward_B - rejected_reward_B - gamma)
    return _mean_loss(losses_B, normalizer), _stats(chosen_reward_B, rejected_reward_B)


def _mean_loss(losses_B: torch.Tensor, normalizer: float | None) -> torch.Tensor:
    """Summed and divided by ``normalizer`` (the whole batch's pair count, so micro-batches accumulate to the
    full batch) or by B."""
    return losses_B.sum() / (normalizer if normalizer is not None else len(losses_B))


@torch.no_grad()
def _stats(chosen_reward_B: torch.Tensor, rejected_reward_B: torch.Tensor) -> dict[str, float]:
    """The implicit rewards' logged statistics."""
    return {"reward_accuracy": float((chosen_reward_B > rejected_reward_B).float().mean()),
            "reward_margin": float((chosen_reward_B - rejected_reward_B).mean()),
            "chosen_reward": float(chosen_reward_B.mean()), "rejected_reward": float(rejected_reward_B.mean())}


def best_worst_pair(rewards: Sequence[float], min_gap: float = 1e-8) -> tuple[int, int] | None:
    """(index of the highest, index of the lowest reward), first occurrences, to turn one rollout
    group into a preference pair (online DPO); None when the gap is below ``min_gap`` (no preference)."""
    if not rewards:
        return None
    best = max(range(len(rewards)), key=rewards.__getitem__)
    worst = min(range(len(rewards)), key=rewards.__getitem__)
    return (best, worst) if rewards[best] - rewards[worst] >= min_gap else None
