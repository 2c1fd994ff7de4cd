"""Losses as pure tensor functions (they import only torch and the standard library), chosen by name.

Each entry of ``ALGORITHMS`` (a registry: an installed package may announce its own under the
``autotelic.algorithms`` entry points) is the whole recipe of one algorithm: its loss family, advantage
estimator and surrogate switches. Rollout-stage options (e.g. DAPO's dynamic sampling and overlong
shaping) live with the rollout stages; recipes turn them on.
"""

from dataclasses import dataclass

from autotelic.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    BATCH_BASELINED,
    BATCH_WHITENED,
    AdvantageEstimator,
    grpo_advantages,
    intra_tree_advantages,
    rae_advantages,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    returns_to_go,
    rloo_advantages,
    step_group_advantages,
    tree_advantages,
    turn_advantages,
)
from autotelic.algorithms.dpo import best_worst_pair, dpo_loss, simpo_loss
from autotelic.algorithms.policy_gradient import (
    KL_ESTIMATORS,
    LOSS_AGGS,
    RATIO_LEVELS,
    PolicyLossSettings,
    kl_penalty,
    policy_loss,
)
from autotelic.registry import Registry


@dataclass(frozen=True)
class AlgorithmSpec:
    name: str
    kind: str  # "policy_gradient" | "dpo"
    advantage: str | None  # key of ADVANTAGE_ESTIMATORS, "rae" (role baselines across steps) or None (DPO)
    ratio_level: str = "token"
    loss_agg: str = "token-mean"
    clip_low: float = 0.2
    clip_high: float = 0.2
    source: str = ""  # paper / peer it comes from


ALGORITHMS: Registry[AlgorithmSpec] = Registry("algorithm", {
    spec.name: spec
    for spec in (
        # token-level aggregation is our documented default, as in DAPO and TRL
        AlgorithmSpec("grpo", "policy_gradient", "grpo", source="DeepSeekMath, Shao et al. 2024"),
        AlgorithmSpec("dr_grpo", "policy_gradient", "dr_grpo", loss_agg="seq-mean-token-sum-norm",
                      source="Liu et al. 2025, Understanding R1-Zero-like training: a critical perspective"),
        AlgorithmSpec("dapo", "policy_gradient", "grpo", clip_high=0.28,
                      source="DAPO, Yu et al. 2025 (dynamic sampling and overlong shaping are rollout-stage options)"),
        AlgorithmSpec("gspo", "policy_gradient", "grpo", ratio_level="sequence", loss_agg="seq-mean-token-mean",
                      clip_low=3e-4, clip_high=4e-4, source="GSPO, Zheng et al. 2025"),
        AlgorithmSpec("rloo", "policy_gradient", "rloo",
                      source="Ahmadian et al. 2024, Back to basics: revisiting REINFORCE-style optimization"),
        AlgorithmSpec("reinforce_pp", "policy_gradient", "reinforce_pp",
                      source="REINFORCE++, Hu et al. 2025 (OpenRLHF; batch-whitened rewards, KL via algorithm.beta)"),
        AlgorithmSpec("reinforce_pp_baseline", "policy_gradient", "reinforce_pp_baseline",
                      source="REINFORCE++-baseline, Hu et al. 2025 (group mean, then batch whitening)"),
        AlgorithmSpec("spiral", "policy_gradient", "rae",
                      source="SPIRAL, Liu et al. 2025 (role-conditioned advantage estimation)"),
        AlgorithmSpec("online_dpo", "dpo", None,
                      source="Guo et al. 2024, Direct language model alignment from online AI feedback"),
        AlgorithmSpec("offline_dpo", "dpo", None, source="DPO, Rafailov et al. 2023"),
    )
})


def get_algorithm(name: str) -> AlgorithmSpec:
    spec = ALGORITHMS.find(name)
    if spec is None:
        raise ValueError(f"unknown algorithm.name '{name}'; available: {', '.join(ALGORITHMS.names())}")
    return spec


__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "BATCH_BASELINED",
    "BATCH_WHITENED",
    "ALGORITHMS",
    "KL_ESTIMATORS",
    "LOSS_AGGS",
    "RATIO_LEVELS",
    "AdvantageEstimator",
    "AlgorithmSpec",
    "PolicyLossSettings",
    "best_worst_pair",
    "dpo_loss",
    "simpo_loss",
    "get_algorithm",
    "grpo_advantages",
    "intra_tree_advantages",
    "kl_penalty",
    "policy_loss",
    "rae_advantages",
    "reinforce_pp_advantages",
    "reinforce_pp_baseline_advantages",
    "returns_to_go",
    "rloo_advantages",
    "step_group_advantages",
    "tree_advantages",
    "turn_advantages",
]
