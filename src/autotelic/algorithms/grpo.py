"""GRPO: group-relative advantages and the clipped policy-gradient loss.

Deviations from the paper (DeepSeekMath), each a config switch:
- token-level aggregation by default (DAPO): every completion token of the batch weighs the
  same, so long wrong answers are not diluted; ``seq-mean-token-mean`` restores the original;
- ``scale_rewards=False`` drops the division by the group std (Dr.GRPO);
- asymmetric clipping (``clip_high`` > ``clip_low``, DAPO's clip-higher) is allowed;
- the KL term is off by default (beta = 0); k1 and k3 estimators are available.
Shapes: B samples, T completion tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def group_advantages(rewards_B: torch.Tensor, group_size: int, scale: bool = True, eps: float = 1e-4) -> torch.Tensor:
    """(r - mean of its group) [/ std of its group]; samples of one group are contiguous."""
    grouped = rewards_B.view(-1, group_size)  # (G, n)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale:
        centred = centred / (grouped.std(dim=1, keepdim=True) + eps)
    return centred.view(-1)


def kl_penalty(logprobs_BT: torch.Tensor, ref_logprobs_BT: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi (Schulman's k1 / k3)."""
    log_ratio = ref_logprobs_BT - logprobs_BT
    if estimator == "k1":
        return -log_ratio
    if estimator == "k3":
        return torch.exp(log_ratio) - log_ratio - 1
    raise ValueError(f"unknown KL estimator '{estimator}'; choose k1 or k3")


@dataclass(frozen=True)
class GRPOSettings:
    clip_low: float = 0.2
    clip_high: float = 0.2
    beta: float = 0.0
    kl_estimator: str = "k3"
    loss_agg: str = "token-mean"


def grpo_loss(
    logprobs_BT: torch.Tensor,
    old_logprobs_BT: torch.Tensor,
    advantages_B: torch.Tensor,
    mask_BT: torch.Tensor,
    settings: GRPOSettings,
    ref_logprobs_BT: torch.Tensor | None = None,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate (+ beta * KL). Returns (loss, diagnostics).

    ``normalizer`` is the token (token-mean) or sequence (seq-mean-token-mean) count of the whole
    batch, so micro-batches accumulate to exactly the full-batch gradient.
    """
    mask = mask_BT.to(logprobs_BT.dtype)
    ratio = torch.exp(logprobs_BT - old_logprobs_BT)
    advantages = advantages_B[:, None]
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1 - settings.clip_low, 1 + settings.clip_high) * advantages
    per_token = -torch.minimum(unclipped, clipped)  # (B, T)
    kl = None
    if settings.beta > 0:
        if ref_logprobs_BT is None:
            raise ValueError("beta > 0 needs reference log-probs")
        kl = kl_penalty(logprobs_BT, ref_logprobs_BT, settings.kl_estimator)
        per_token = per_token + settings.beta * kl
    if settings.loss_agg == "token-mean":
        loss = (per_token * mask).sum() / (normalizer if normalizer is not None else mask.sum().clamp(min=1))
    elif settings.loss_agg == "seq-mean-token-mean":
        per_sequence = (per_token * mask).sum(1) / mask.sum(1).clamp(min=1)
        loss = per_sequence.sum() / (normalizer if normalizer is not None else len(per_sequence))
    else:
        raise ValueError(f"unknown loss_agg '{settings.loss_agg}'; choose token-mean or seq-mean-token-mean")
    with torch.no_grad():
        tokens = mask.sum().clamp(min=1)
        is_clipped = ((ratio < 1 - settings.clip_low) & (advantages < 0)) | ((ratio > 1 + settings.clip_high) & (advantages > 0))
        stats = {
            "clip_fraction": float((is_clipped.to(mask.dtype) * mask).sum() / tokens),
            "ratio_mean": float((ratio * mask).sum() / tokens),
        }
        if kl is not None:
            stats["kl"] = float((kl * mask).sum() / tokens)
    return loss, stats
