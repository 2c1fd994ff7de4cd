"""From a batch of kept groups to a gradient step: tensors for the configured algorithm's loss.

Policy-gradient algorithms (GRPO and its family) train on every sample with its advantage; DPO
algorithms train on (chosen, rejected) pairs, from the best and worst sample of each rollout group
(online) or from a dataset (offline). Micro-batches accumulate to exactly the full-batch gradient:
every loss is divided by the whole batch's normalizer. ``RoleBaselines`` keeps RAE's per-role reward
averages (``algorithm.name=spiral``) from step to step; the trainer checkpoints them.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from autotelic.algorithms import (
    ADVANTAGE_ESTIMATORS,
    AlgorithmSpec,
    PolicyLossSettings,
    best_worst_pair,
    dpo_loss,
    intra_tree_advantages,
    policy_loss,
    rae_advantages,
    simpo_loss,
    tree_advantages,
)
from autotelic.backends import PolicyBackend
from autotelic.backends.hf import HFPolicy
from autotelic.config import AlgorithmConfig
from autotelic.micro_batches import micro_batches
from autotelic.turn_credit import TurnCredit, credits_turns, later_turns_sharing_a_state, turn_credit_of
from autotelic.types import Group, Sample


def _pad(rows: list[list[float]], width: int, device: torch.device) -> torch.Tensor:
    out = torch.zeros(len(rows), width)  # filled on the CPU, then one copy: not a transfer per row on a GPU
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=out.dtype)
    return out.to(device)


def loss_settings(spec: AlgorithmSpec, algo: AlgorithmConfig) -> PolicyLossSettings:
    """The algorithm's own switches, with the config's explicit values winning."""
    return PolicyLossSettings(
        clip_low=spec.clip_low if algo.clip_low is None else algo.clip_low,
        clip_high=spec.clip_high if algo.clip_high is None else algo.clip_high,
        ratio_level=spec.ratio_level,
        loss_agg=spec.loss_agg if algo.loss_agg is None else algo.loss_agg,
        beta=algo.beta, kl_estimator=algo.kl_estimator, is_cap=algo.is_cap,
    )


@dataclass
class _Targets:
    """Per-sample advantages (a number, or one per token for trees) and loss masks."""

    advantages: list[float | list[float]]
    masks: list[list[int]]


def role_of(group: Group, sample: Sample) -> str:
    """RAE's role: the game and the seat a self-play sample played (its family alone for other samples)."""
    player = sample.info.get("player")
    return group.task.family if player is None else f"{group.task.family}/p{player}"


@dataclass
class RoleBaselines:
    """RAE's state: each role's reward average, carried across steps and checkpointed with the run.
    Replayed groups (``replay.name=buffer``) enter the averages again when they are trained again."""

    decay: float = 0.95
    values: dict[str, float] = field(default_factory=dict)

    def advantages(self, groups: list[Group]) -> list[float]:
        roles = [role_of(g, s) for g in groups for s in g.samples]
        rewards_B = torch.tensor([r for g in groups for r in g.rewards])
        advantages_B, self.values = rae_advantages(rewards_B, roles, self.values, self.decay)
        return advantages_B.tolist()

    def metrics(self) -> dict[str, float]:
        return {f"train/role_baseline/{role}": value for role, value in self.values.items()}

    def state_dict(self) -> dict[str, Any]:
        return {"values": dict(self.values)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.values = dict(state["values"])


def _targets(groups: list[Group], spec: AlgorithmSpec, baselines: RoleBaselines | None = None,
             turn_credit: TurnCredit | None = None) -> _Targets:
    samples = [s for g in groups for s in g.samples]
    masks = [s.loss_mask() for s in samples]
    if turn_credit is not None:  # per turn where a group's episodes have per-turn rewards, else per episode
        advantages: list[float | list[float]] = []
        for group in groups:
            if credits_turns(group):
                advantages.extend(turn_credit.advantages(group, scale=spec.advantage == "grpo"))
            else:
                advantages.extend(_targets([group], spec, baselines).advantages)
        return _Targets(advantages, masks)
    if spec.advantage == "rae":
        if baselines is None:
            raise ValueError(f"algorithm {spec.name} needs the run's RoleBaselines")
        return _Targets(baselines.advantages(groups), masks)
    if any(s.parent is not None for s in samples):  # tree rollouts: credit per segment
        advantages = []
        tree_masks = []
        for group in groups:
            per_token, mask = tree_advantages(
                group.rewards, [s.parent for s in group.samples], [s.branch_at for s in group.samples],
                [len(s.token_ids) for s in group.samples], scale=spec.advantage != "dr_grpo")
            advantages.extend(per_token)
            tree_masks.extend(mask)
        masks = [[a * b for a, b in zip(own, tree)] for own, tree in zip(masks, tree_masks)]
        return _Targets(advantages, masks)
    rewards_B = torch.tensor([r for g in groups for r in g.rewards])
    sizes = [len(g.samples) for g in groups]
    return _Targets(ADVANTAGE_ESTIMATORS[spec.advantage](rewards_B, sizes).tolist(), masks)


def with_intra_tree(targets: _Targets, groups: list[Group], scale: bool) -> _Targets:
    """``targets`` plus Tree-GRPO's intra-tree term (``algorithm.intra_tree``) on every token of each episode: a
    tree copy (``info["forked"]``, placed after its parent) shares its parent's root."""
    extra = []
    for group in groups:
        roots: list[int] = []
        for i, sample in enumerate(group.samples):
            roots.append(i if "forked" not in sample.info else roots[sample.info["forked"]["from"]])
        extra += intra_tree_advantages(group.rewards, roots, scale)
    return _Targets([[a + e for a in adv] if isinstance(adv, list) else adv + e
                     for adv, e in zip(targets.advantages, extra)], targets.masks)


def _normalizer(masks: list[list[int]], loss_agg: str, max_new_tokens: int) -> float:
    if loss_agg == "token-mean":
        return float(max(1, sum(map(sum, masks))))
    if loss_agg == "seq-mean-token-mean":  # a sequence masked whole (cut overlong, a branch's copy) trains nothing
        return float(max(1, sum(1 for mask in masks if any(mask))))
    return float(max(1, len(masks)) * max_new_tokens)  # seq-mean-token-sum-norm


def batch_normalizer(groups: list[Group], spec: AlgorithmSpec, algo: AlgorithmConfig, max_new_tokens: int) -> float:
    """The whole batch's loss denominator: what each rank passes when it trains a share of the batch (FSDP)."""
    return _normalizer(_targets(groups, spec).masks, loss_settings(spec, algo).loss_agg, max_new_tokens)


def policy_gradient_update(policy: PolicyBackend, groups: list[Group], spec: AlgorithmSpec, algo: AlgorithmConfig,
                           temperature: float, max_new_tokens: int, baselines: RoleBaselines | None = None,
                           normalizer: float | None = None) -> dict[str, float]:
    """``algo.updates_per_batch`` optimizer steps over ``groups``. ``normalizer``: the whole batch's
    (``batch_normalizer``) when ``groups`` is one rank's share of it, so that the ranks' losses and gradients
    sum to the whole batch's; stats are then averages over the share."""
    settings = loss_settings(spec, algo)
    targets = _targets(groups, spec, baselines, turn_credit_of(algo))
    if algo.intra_tree:
        targets = with_intra_tree(targets, groups, scale=spec.advantage == "grpo")
    if normalizer is None:
        normalizer = _normalizer(targets.masks, settings.loss_agg, max_new_tokens)
    decoupled = algo.off_policy == "decoupled"
    proximal: dict[int, torch.Tensor] = {}  # chunk -> log-probs before this batch's first update
    totals: dict[str, float] = defaultdict(float)
    for _ in range(algo.updates_per_batch):
        offset = 0
        for c, chunk in enumerate(micro_batches(groups, algo.micro_batch_groups, algo.micro_batch_tokens)):
            samples = [s for g in chunk for s in g.samples]
            count = len(samples)
            prompts, completions = [g.prompt_ids for g in chunk], [s.token_ids for s in samples]
            sizes = [len(g.samples) for g in chunk]
            logprobs_BT, pad_mask_BT = policy.completion_logprobs(prompts, completions, sizes, temperature)
            width = logprobs_BT.shape[1]
            device = logprobs_BT.device
            mask_BT = pad_mask_BT * _pad(targets.masks[offset:offset + count], width, device)
            sampled_BT = _pad([s.logprobs for s in samples], width, device)
            chunk_advantages = targets.advantages[offset:offset + count]
            if any(isinstance(a, list) for a in chunk_advantages):  # per token; a sample's one value on every token
                advantages = _pad([a if isinstance(a, list) else [a] * len(s.token_ids)
                                   for a, s in zip(chunk_advantages, samples)], width, device)
            else:
                advantages = torch.tensor(chunk_advantages, device=device)
            offset += count
            ref_BT = None
            if settings.beta > 0:
                ref_BT, _ = policy.completion_logprobs(prompts, completions, sizes, temperature, reference=True)
            if decoupled:
                old_BT = proximal.setdefault(c, logprobs_BT.detach())
                loss, stats = policy_loss(logprobs_BT, old_BT, advantages, mask_BT, settings, ref_BT,
                                          behaviour_logprobs_BT=sampled_BT, normalizer=normalizer)
            else:
                loss, stats = policy_loss(logprobs_BT, sampled_BT, advantages, mask_BT, settings, ref_BT,
                                          normalizer=normalizer)
            _backward(loss, policy)
            totals["train/loss"] += loss.item() / algo.updates_per_batch
            for key, value in stats.items():
                totals[f"train/{key}"] += value * count / len(targets.masks) / algo.updates_per_batch
        totals.update({f"train/{k}": v for k, v in policy.optimizer_step().items()})
    totals["train/trained_tokens"] = float(sum(map(sum, targets.masks)))
    if algo.turn_credit and algo.turn_baseline == "state":
        totals["train/later_turns_sharing_a_state"] = later_turns_sharing_a_state(groups)
    if baselines is not None:
        totals.update(baselines.metrics())
    return dict(totals)


def _backward(loss: torch.Tensor, policy: PolicyBackend) -> None:
    if not torch.isfinite(loss):
        policy.zero_grad()
        raise FloatingPointError(f"the loss is {loss.item()}")
    loss.backward()


@dataclass
class PreferencePair:
    prompt_ids: list[int]
    chosen: list[int]
    rejected: list[int]
    chosen_mask: list[int] | None = None  # observation tokens of episodes are not the policy's choice
    rejected_mask: list[int] | None = None


def rollout_pairs(groups: list[Group]) -> list[PreferencePair]:
    """Online DPO: the best and the worst sample of each group whose rewards differ."""
    pairs = []
    for group in groups:
        picked = best_worst_pair(group.rewards)
        if picked is not None:
            best, worst = (group.samples[i] for i in picked)
            pairs.append(PreferencePair(group.prompt_ids, best.token_ids, worst.token_ids,
                                        best.loss_mask(), worst.loss_mask()))
    return pairs


def _sequence_logprobs(policy: PolicyBackend, pairs: list[PreferencePair], reference: bool,
                       mean: bool = False) -> torch.Tensor:
    """(2P,) log-probs summed (or, ``mean``, averaged) over the trained tokens: chosen and rejected of each pair,
    sharing the prompt's forward."""
    completions = [c for p in pairs for c in (p.chosen, p.rejected)]
    own_masks = [m if m is not None else [1] * len(c) for p in pairs
                 for c, m in ((p.chosen, p.chosen_mask), (p.rejected, p.rejected_mask))]
    logprobs_BT, mask_BT = policy.completion_logprobs([p.prompt_ids for p in pairs], completions, 2, 1.0,
                                                      reference=reference)
    trained_BT = mask_BT * _pad(own_masks, logprobs_BT.shape[1], logprobs_BT.device)
    summed_B = (logprobs_BT * trained_BT).sum(1)
    return summed_B / trained_BT.sum(1).clamp(min=1) if mean else summed_B


def preference_loss(policy: PolicyBackend, pairs: list[PreferencePair], algo: AlgorithmConfig,
                    normalizer: float) -> tuple[torch.Tensor, dict[str, float]]:
    """``algorithm.dpo_loss``: sigmoid DPO against the reference policy, or reference-free SimPO."""
    if algo.dpo_loss == "simpo":
        policy_B2 = _sequence_logprobs(policy, pairs, reference=False, mean=True).view(-1, 2)
        return simpo_loss(policy_B2[:, 0], policy_B2[:, 1], algo.dpo_beta, algo.simpo_gamma, normalizer)
    with torch.no_grad():
        ref_B2 = _sequence_logprobs(policy, pairs, reference=True).view(-1, 2)
    policy_B2 = _sequence_logprobs(policy, pairs, reference=False).view(-1, 2)
    return dpo_loss(policy_B2[:, 0], policy_B2[:, 1], ref_B2[:, 0], ref_B2[:, 1], algo.dpo_beta,
                    algo.dpo_label_smoothing, normalizer=normalizer)


def dpo_update(policy: PolicyBackend, pairs: list[PreferencePair], algo: AlgorithmConfig,
               normalizer: float | None = None) -> dict[str, float]:
    """``normalizer``: the whole batch's pair count when ``pairs`` is one rank's share of it (FSDP)."""
    totals: dict[str, float] = defaultdict(float)
    if not pairs:
        return {"train/pairs": 0.0}
    for _ in range(algo.updates_per_batch):
        for chunk in [pairs[i:i + algo.micro_batch_groups] for i in range(0, len(pairs), algo.micro_batch_groups)]:
            loss, stats = preference_loss(policy, chunk, algo, normalizer or len(pairs))
            _backward(loss, policy)
            totals["train/loss"] += loss.item() / algo.updates_per_batch
            for key, value in stats.items():
                totals[f"train/{key}"] += value * len(chunk) / len(pairs) / algo.updates_per_batch
        totals.update({f"train/{k}": v for k, v in policy.optimizer_step().items()})
    totals["train/pairs"] = float(len(pairs))
    return dict(totals)


def train_on_groups(policy: PolicyBackend, groups: list[Group], spec: AlgorithmSpec, algo: AlgorithmConfig,
                    temperature: float, max_new_tokens: int,
                    baselines: RoleBaselines | None = None) -> dict[str, float]:
    """One update of ``policy`` by the run's algorithm: DPO on each group's best and worst answers, else the
    policy gradient on every sample."""
    if spec.kind == "dpo":
        return dpo_update(policy, rollout_pairs(groups), algo)
    return policy_gradient_update(policy, groups, spec, algo, temperature, max_new_tokens, baselines)


@dataclass
class SideLearner:
    """A model trained beside the policy on groups of its own (eva's creator on its rewrites): the run's
    algorithm, its own optimizer; the part that holds it checkpoints it."""

    policy: HFPolicy
    spec: AlgorithmSpec
    algo: AlgorithmConfig
    temperature: float  # the one it samples at, for the importance ratio
    max_new_tokens: int

    def update(self, groups: list[Group]) -> dict[str, float]:
        return train_on_groups(self.policy, groups, self.spec, self.algo, self.temperature, self.max_new_tokens)

    def state_dict(self) -> dict[str, Any]:
        return self.policy.training_state()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_training_state(state)


def pairs_from_rollouts(rows: list[dict]) -> list[dict[str, str]]:
    """Offline preference data from a run's rollouts.jsonl: per (step, prompt), the best and the worst
    completion, where their rewards differ (whole replies: a partial-solution prompt's prefix included).
    The run's own rewards are the only labels."""
    groups: dict[tuple[int, str, str], list[dict]] = defaultdict(list)
    for row in rows:
        if row.get("reward") is not None:  # a partial-solution prompt's group is its own group
            groups[(row["step"], row["prompt"], row.get("response_prefix", ""))].append(row)
    pairs = []
    for (_, prompt, prefix), members in groups.items():
        picked = best_worst_pair([m["reward"] for m in members])
        if picked is not None:
            best, worst = (members[i] for i in picked)
            pairs.append({"prompt": prompt, "chosen": prefix + best["completion"],
                          "rejected": prefix + worst["completion"]})
    return pairs


class PairsFileError(ValueError):
    """A preference dataset that cannot be read, reported with its file and line."""


def _jsonl(path: Path) -> list[tuple[int, Any]]:
    """(line number, value) of each non-blank line of a JSONL file; a line that is not JSON is named."""
    rows = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if line.strip():
            try:
                rows.append((number, json.loads(line)))
            except json.JSONDecodeError as error:
                raise PairsFileError(f"{path}:{number}: not valid JSON ({error.msg})") from error
    return rows


def load_pairs(path: str | Path) -> list[dict[str, str]]:
    """JSONL rows {"prompt", "chosen", "rejected"} (user message and two assistant replies)."""
    path = Path(path)
    if not path.is_file():
        raise PairsFileError(f"preference dataset not found: {path}")
    rows = []
    for number, row in _jsonl(path):
        missing = [k for k in ("prompt", "chosen", "rejected") if not isinstance(row, dict) or
                   not isinstance(row.get(k), str)]
        if missing:
            raise PairsFileError(f"{path}:{number}: needs string fields prompt, chosen, rejected; "
                                 f"missing or not text: {', '.join(missing)}")
        rows.append(row)
    if not rows:
        raise PairsFileError(f"preference dataset {path} holds no pairs")
    return rows


def dataset_pairs(rows: list[dict[str, str]], start: int, count: int, seed: int, policy: PolicyBackend,
                  ) -> list[PreferencePair]:
    """Offline DPO's next ``count`` pairs from position ``start`` of the dataset cycled epoch after epoch, each
    epoch in its own order (by ``seed``), so a resumed run continues where the checkpoint left off."""
    batch = []
    for position in range(start, start + count):
        epoch, index = divmod(position, len(rows))
        order = list(range(len(rows)))
        random.Random(f"{seed}/{epoch}").shuffle(order)
        row = rows[order[index]]
        batch.append(PreferencePair(policy.encode_prompt(row["prompt"]), policy.encode_completion(row["chosen"]),
                                    policy.encode_completion(row["rejected"])))
    return batch


def load_rollouts(path: Path) -> list[dict[str, Any]]:
    """A run's rollouts.jsonl, each row checked for the fields ``pairs_from_rollouts`` reads."""
    rows = []
    for number, row in _jsonl(path):
        fields = row if isinstance(row, dict) else {}
        reward = fields.get("reward")
        if not (isinstance(fields.get("step"), int) and isinstance(fields.get("prompt"), str)
                and isinstance(fields.get("completion"), str) and (reward is None or isinstance(reward, (int, float)))):
            raise PairsFileError(f"{path}:{number}: a rollout row needs step (int), prompt and completion (text) and "
                                 "reward (a number or null); was the file edited?")
        rows.append(row)
    return rows
