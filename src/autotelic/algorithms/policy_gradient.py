"""The clipped policy-gradient surrogate shared by GRPO, Dr.GRPO, DAPO, GSPO, RLOO and REINFORCE++.

Those algorithms differ in their advantage estimator (``advantages``) and in a few switches here:
the level of the importance ratio (token, or sequence for GSPO), the clip range (asymmetric for
DAPO's clip-higher) and how per-token losses are aggregated. An optional KL penalty to a reference
policy and a decoupled off-policy correction (AReaL) come on top.
Shapes: B sequences, T completion tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

RATIO_LEVELS = ("token", "sequence")
LOSS_AGGS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_ESTIMATORS = ("k1", "k3")


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"unknown {name} '{value}'; choose one of: {', '.join(choices)}")


@dataclass(frozen=True)
class PolicyLossSettings:
    clip_low: float = 0.2
    clip_high: float = 0.2
    ratio_level: str = "token"  # or "sequence" (GSPO)
    loss_agg: str = "token-mean"
    beta: float = 0.0  # weight of the KL penalty to the reference policy; 0 turns it off
    kl_estimator: str = "k3"
    is_cap: float = 2.0  # upper bound on the decoupled importance weight pi_old / pi_behaviour

    def __post_init__(self) -> None:
        # fail when the config is built, not at the first training step
        _check_choice("ratio_level", self.ratio_level, RATIO_LEVELS)
        _check_choice("loss_agg", self.loss_agg, LOSS_AGGS)
        _check_choice("kl_estimator", self.kl_estimator, KL_ESTIMATORS)


def kl_penalty(logprobs_BT: torch.Tensor, ref_logprobs_BT: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token KL penalty from samples of pi, as a loss term. k3 (Schulman's): its value estimates
    KL(pi || pi_ref), never negative, and its gradient is GRPO's. k1: the value is the log-ratio, but the log-ratio's
    own gradient is grad log pi, which is zero in expectation over pi's samples (the penalty would pull nowhere);
    so its gradient is the score-function one, log-ratio (detached) x grad log pi, whose expectation is the gradient
    of KL(pi || pi_ref)."""
    _check_choice("kl_estimator", estimator, KL_ESTIMATORS)
    log_ratio_BT = ref_logprobs_BT - logprobs_BT
    if estimator == "k1":
        k1_BT = -log_ratio_BT.detach()
        return k1_BT + k1_BT * (logprobs_BT - logprobs_BT.detach())
    return torch.expm1(log_ratio_BT) - log_ratio_BT  # k3: unbiased and never negative


def _masked_mean(values_BT: torch.Tensor, mask_BT: torch.Tensor) -> float:
    return float((values_BT * mask_BT).sum() / mask_BT.sum().clamp(min=1))


def _per_token(advantages: torch.Tensor, like_BT: torch.Tensor) -> torch.Tensor:
    """Advantages as a (B, 1) or (B, T) tensor that broadcasts against per-token losses."""
    if advantages.shape == like_BT.shape[:1]:
        return advantages[:, None].to(like_BT.dtype)
    if advantages.shape == like_BT.shape:
        return advantages.to(like_BT.dtype)
    raise ValueError(f"advantages must have shape (B,) or (B, T) = {tuple(like_BT.shape)}, got {tuple(advantages.shape)}")


def _importance_ratio(logprobs_BT: torch.Tensor, old_logprobs_BT: torch.Tensor, mask_BT: torch.Tensor, level: str) -> torch.Tensor:
    """pi / pi_old per token, or GSPO's sequence ratio s_i = exp(mean_t log(pi / pi_old)) on every token.

    GSPO's value is s_i everywhere while its gradient is s_i * grad log pi(y_t) per token
    (GSPO-token): with per-sequence advantages and seq-mean-token-mean this is exactly the
    gradient of GSPO's sequence objective. The length normalisation lets long and short sequences
    share one (narrow) clip range.
    """
    log_ratio_BT = logprobs_BT - old_logprobs_BT
    if level == "token":
        return torch.exp(log_ratio_BT)
    seq_ratio_B = torch.exp((log_ratio_BT * mask_BT).sum(1) / mask_BT.sum(1).clamp(min=1))
    return seq_ratio_B.detach()[:, None] * torch.exp(logprobs_BT - logprobs_BT.detach())


def _aggregate(loss_BT: torch.Tensor, mask_BT: torch.Tensor, loss_agg: str, normalizer: float | None) -> torch.Tensor:
    """Reduce per-token losses to one number.

    Every mode is a sum over the micro-batch divided by a denominator; ``normalizer`` replaces
    that denominator by the whole batch's (tokens, sequences, or sequences * max_new_tokens), so
    the losses (and gradients) of micro-batches add up to exactly those of the full batch.
    """
    masked_BT = loss_BT * mask_BT
    if loss_agg == "token-mean":  # every token of the batch weighs the same (DAPO)
        return masked_BT.sum() / (normalizer if normalizer is not None else mask_BT.sum().clamp(min=1))
    if loss_agg == "seq-mean-token-mean":  # every sequence weighs the same (original GRPO, GSPO)
        per_sequence_B = masked_BT.sum(1) / mask_BT.sum(1).clamp(min=1)
        return per_sequence_B.sum() / (normalizer if normalizer is not None else len(per_sequence_B))
    # seq-mean-token-sum-norm (Dr.GRPO): a constant denominator, so no length bias
    return masked_BT.sum() / (normalizer if normalizer is not None else loss_BT.numel())


def policy_loss(
    logprobs_BT: torch.Tensor,
    old_logprobs_BT: torch.Tensor,
    advantages: torch.Tensor,
    mask_BT: torch.Tensor,
    settings: PolicyLossSettings,
    ref_logprobs_BT: torch.Tensor | None = None,
    behaviour_logprobs_BT: torch.Tensor | None = None,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate -min(ratio * A, clip(ratio) * A) (+ beta * KL). Returns (loss, diagnostics).

    ``advantages``: (B,) per sequence or (B, T) per token (tree rollouts). ``mask_BT``: the loss
    mask, 0 for padding, observation tokens and shared prefixes (float, bool or int).
    ``behaviour_logprobs_BT``: log-probs of the policy that actually sampled the tokens, when it is
    older than ``old_logprobs_BT`` (asynchronous rollouts). ``old_logprobs_BT`` is then the proximal
    policy that anchors the clip, and each token's loss is weighted by the detached, capped
    importance weight min(pi_old / pi_behaviour, is_cap) (decoupled PPO, as in AReaL).
    ``normalizer``: the whole batch's denominator for ``settings.loss_agg`` (see ``_aggregate``),
    so micro-batch losses sum to the full-batch loss.
    """
    mask_BT = mask_BT.to(logprobs_BT.dtype)
    advantages_BT = _per_token(advantages, logprobs_BT)
    ratio_BT = _importance_ratio(logprobs_BT, old_logprobs_BT, mask_BT, settings.ratio_level)
    low, high = 1 - settings.clip_low, 1 + settings.clip_high
    loss_BT = -torch.minimum(ratio_BT * advantages_BT, ratio_BT.clamp(low, high) * advantages_BT)
    kl_BT = None
    if settings.beta > 0:
        if ref_logprobs_BT is None:
            raise ValueError("beta > 0 needs reference log-probs (ref_logprobs_BT)")
        kl_BT = kl_penalty(logprobs_BT, ref_logprobs_BT, settings.kl_estimator)
        loss_BT = loss_BT + settings.beta * kl_BT
    is_weight_BT = None
    if behaviour_logprobs_BT is not None:
        is_weight_BT = torch.exp(old_logprobs_BT - behaviour_logprobs_BT).clamp(max=settings.is_cap).detach()
        loss_BT = loss_BT * is_weight_BT
    loss = _aggregate(loss_BT, mask_BT, settings.loss_agg, normalizer)
    with torch.no_grad():
        # tokens whose gradient the clip removed
        clipped_BT = ((ratio_BT < low) & (advantages_BT < 0)) | ((ratio_BT > high) & (advantages_BT > 0))
        stats = {
            "clip_fraction": _masked_mean(clipped_BT.to(mask_BT.dtype), mask_BT),
            "ratio_mean": _masked_mean(ratio_BT, mask_BT),
        }
        if kl_BT is not None:
            stats["kl"] = _masked_mean(kl_BT, mask_BT)
        if is_weight_BT is not None:
            stats["is_weight_mean"] = _masked_mean(is_weight_BT, mask_BT)
    return loss, stats
