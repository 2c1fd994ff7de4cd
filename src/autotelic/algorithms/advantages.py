"""Advantage estimators: turn rewards into the per-sample (or per-token) weights of the policy gradient.

A batch is flat: B samples in which the samples of one task (a group) are contiguous. Groups may
differ in size (filters and partial rollouts drop samples), so they are given by ``group_sizes``,
which sums to B. Every estimator in ``ADVANTAGE_ESTIMATORS`` uses no value model: the group's own rewards as
baseline, or (REINFORCE++) the batch's; ``rae_advantages`` instead baselines each role by its rewards in earlier
steps, state its caller keeps and passes in.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from functools import partial

import torch

AdvantageEstimator = Callable[[torch.Tensor, Sequence[int]], torch.Tensor]


def _as_batch(rewards_B: torch.Tensor, group_sizes: Sequence[int]) -> torch.Tensor:
    """The rewards as floats, once the group sizes are checked to tile the batch."""
    if any(n < 1 for n in group_sizes) or sum(group_sizes) != rewards_B.numel():
        raise ValueError(f"group_sizes {list(group_sizes)} must be positive and sum to the batch size {rewards_B.numel()}")
    return rewards_B if rewards_B.is_floating_point() else rewards_B.float()


def _centred(rewards_B: torch.Tensor, group_sizes: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(reward - its group's mean, group id of every sample, size of every group)."""
    rewards_B = _as_batch(rewards_B, group_sizes)
    sizes_G = torch.tensor(list(group_sizes), dtype=rewards_B.dtype, device=rewards_B.device)
    index_B = torch.repeat_interleave(torch.arange(len(sizes_G), device=rewards_B.device), sizes_G.long())
    mean_G = torch.zeros_like(sizes_G).index_add_(0, index_B, rewards_B) / sizes_G
    return rewards_B - mean_G[index_B], index_B, sizes_G


def grpo_advantages(rewards_B: torch.Tensor, group_sizes: Sequence[int], scale: bool = True, eps: float = 1e-4) -> torch.Tensor:
    """GRPO: (r - group mean) / (group std + eps); ``scale=False`` keeps only the centring (Dr.GRPO),
    which removes the bias towards groups with low reward variance (too easy or too hard tasks).
    The std is unbiased, as torch.std; a group of one sample gets advantage 0."""
    centred_B, index_B, sizes_G = _centred(rewards_B, group_sizes)
    if not scale:
        return centred_B
    var_G = torch.zeros_like(sizes_G).index_add_(0, index_B, centred_B**2) / (sizes_G - 1).clamp(min=1)
    return centred_B / (var_G.sqrt()[index_B] + eps)


def rloo_advantages(rewards_B: torch.Tensor, group_sizes: Sequence[int]) -> torch.Tensor:
    """RLOO: r_i - mean of the other samples of its group, an unbiased baseline; groups of one get 0."""
    centred_B, index_B, sizes_G = _centred(rewards_B, group_sizes)
    n_B = sizes_G[index_B]
    # r_i - (sum - r_i) / (n - 1) == n / (n - 1) * (r_i - mean)
    return centred_B * n_B / (n_B - 1).clamp(min=1)


def reinforce_pp_advantages(rewards_B: torch.Tensor, group_sizes: Sequence[int], eps: float = 1e-4) -> torch.Tensor:
    """REINFORCE++ (Hu et al. 2025): the rewards whitened across the whole batch, no per-prompt baseline, so a
    group of one still carries signal (CoMAS's turns: the batch is one agent's, as in its official code).
    ``eps`` is GRPO's: a batch whose rewards differ only by rounding is not blown up to unit-size advantages."""
    rewards_B = _as_batch(rewards_B, group_sizes)
    spread = rewards_B.std() if rewards_B.numel() > 1 else rewards_B.new_zeros(())
    return (rewards_B - rewards_B.mean()) / (spread + eps)


def reinforce_pp_baseline_advantages(rewards_B: torch.Tensor, group_sizes: Sequence[int], eps: float = 1e-4,
                                     ) -> torch.Tensor:
    """REINFORCE++-baseline (Hu et al. 2025): subtract the group mean, then whiten across the whole
    batch. One batch-wide scale keeps the per-group std out of the gradient (no bias towards
    low-variance groups) while still bounding its size."""
    centred_B, _, _ = _centred(rewards_B, group_sizes)
    spread = centred_B.std() if centred_B.numel() > 1 else centred_B.new_zeros(())
    return (centred_B - centred_B.mean()) / (spread + eps)


BATCH_BASELINED = frozenset({"reinforce_pp"})
"""Estimators whose baseline is the whole batch: a group of one sample still has an advantage."""
BATCH_WHITENED = frozenset({"reinforce_pp", "reinforce_pp_baseline"})
"""Estimators that scale by the whole batch's spread: a share of the batch would give other advantages."""

ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {
    "grpo": grpo_advantages,
    "dr_grpo": partial(grpo_advantages, scale=False),
    "rloo": rloo_advantages,
    "reinforce_pp": reinforce_pp_advantages,
    "reinforce_pp_baseline": reinforce_pp_baseline_advantages,
}


def rae_advantages(rewards_B: torch.Tensor, roles_B: Sequence[str], baselines: Mapping[str, float], decay: float,
                   ) -> tuple[torch.Tensor, dict[str, float]]:
    """Role-conditioned advantage estimation (RAE, SPIRAL, Liu et al. 2025): r - b[role], where b[role] is
    an exponential moving average, b <- decay * b + (1 - decay) * r, of the rewards of that role (a game
    and a seat in it) over all earlier samples, across steps. In a zero-sum game one seat may win more
    often whatever the play (who moves first, who holds the card); its baseline absorbs that, so the
    gradient credits the play, not the seat.

    Samples are taken in batch order, and each reads its role's baseline before its own reward enters it,
    as SPIRAL's code does: no sample is its own baseline. A role not seen before starts at 0. Returns the
    advantages and the updated baselines; ``baselines`` itself is not modified.
    """
    if len(roles_B) != rewards_B.numel():
        raise ValueError(f"{len(roles_B)} roles for {rewards_B.numel()} rewards")
    values = dict(baselines)
    advantages = []
    for reward, role in zip(rewards_B.tolist(), roles_B):
        baseline = values.get(role, 0.0)
        advantages.append(reward - baseline)
        values[role] = decay * baseline + (1.0 - decay) * reward
    dtype = rewards_B.dtype if rewards_B.is_floating_point() else torch.float32
    return torch.tensor(advantages, dtype=dtype, device=rewards_B.device), values


def tree_advantages(
    rewards: list[float],
    parents: list[int | None],
    branch_at: list[int],
    lengths: list[int],
    scale: bool = True,
    eps: float = 1e-4,
) -> tuple[list[list[float]], list[list[int]]]:
    """Per-token advantages and loss masks for ONE group of tree rollouts (segment-level credit in
    the spirit of TreeRL, Hou et al. 2025, and TreePO, Li et al. 2025), at any depth.

    Roots (parent None) are the ordinary samples of the group. A branch i continues sample ``parents[i]`` (a root
    or an earlier branch) differently after their first ``branch_at[i]`` shared tokens, inside the parent's own
    tokens; all children of one sample branch at the same point k. With T(i) = sample i and every sample
    branched from it, directly or not, V(i) = mean reward over T(i) and b = mean over roots of V(root):
    - sample i's own tokens before its children's point k get V(i) - (V(parent) for a branch, b for a root): the
      segment is judged by every continuation of it, against the alternatives at the point it started;
    - its tokens from k on get (own reward - V(i)): its tail is one alternative at k, against their mean;
    - a branch's first ``branch_at`` tokens get mask 0 and advantage 0: shared tokens are trained once, through
      the sample that drew them. A sample without children gets its segment's value on every own token.
    One level deep this is: a root's prefix V_j - b, its tail r_j - V_j, each branch r - V_j.
    With ``scale`` everything is divided by (std of the group's rewards + eps). The masks cover the
    tree only; multiply them with each sample's own loss mask (observation tokens).
    """
    n = len(rewards)
    if not len(parents) == len(branch_at) == len(lengths) == n:
        raise ValueError("rewards, parents, branch_at and lengths must have one entry per sample")
    start = [0 if p is None else branch_at[i] for i, p in enumerate(parents)]  # where a sample's own tokens begin
    children_at: dict[int, int] = {}
    for i, p in enumerate(parents):
        if p is None:
            continue
        if not 0 <= p < i:
            raise ValueError(f"sample {i}: parent {p} is not an earlier sample of the group")
        if children_at.setdefault(p, branch_at[i]) != branch_at[i]:
            raise ValueError(f"sample {i} branches from sample {p} at token {branch_at[i]}, its siblings at "
                             f"{children_at[p]}")
        if not start[p] <= branch_at[i] <= min(lengths[i], lengths[p]):
            raise ValueError(f"sample {i}: branch_at {branch_at[i]} lies outside its own or its parent's own tokens")
    totals, counts = list(rewards), [1] * n
    for i in reversed(range(n)):  # children come after their parents: sums flow up the tree
        p = parents[i]
        if p is not None:
            totals[p] += totals[i]
            counts[p] += counts[i]
    value = [total / count for total, count in zip(totals, counts)]
    baseline = statistics.mean(value[i] for i, p in enumerate(parents) if p is None)
    factor = 1.0 / (statistics.stdev(rewards) + eps) if scale and n > 1 else 1.0
    advantages, masks = [], []
    for i, p in enumerate(parents):
        split = children_at.get(i, lengths[i])
        head = value[i] - (baseline if p is None else value[p])
        tail = rewards[i] - value[i]
        advantages.append([0.0] * start[i] + [head * factor] * (split - start[i])
                          + [tail * factor] * (lengths[i] - split))
        masks.append([0] * start[i] + [1] * (lengths[i] - start[i]))
    return advantages, masks


def returns_to_go(rewards: Sequence[float], discount: float = 1.0) -> list[float]:
    """Each turn's return from there on: r_t + discount * r_(t+1) + discount^2 * r_(t+2) + ..."""
    returns, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        running = rewards[t] + discount * running
        returns[t] = running
    return returns


def _check_turns(turn_rewards: list[list[float]], turn_starts: list[list[int]], lengths: list[int]) -> None:
    if not len(turn_rewards) == len(turn_starts) == len(lengths):
        raise ValueError("turn_rewards, turn_starts and lengths must have one entry per episode")
    for rewards, starts in zip(turn_rewards, turn_starts):
        if len(rewards) != len(starts):
            raise ValueError(f"{len(rewards)} turn rewards for {len(starts)} turns")


def _per_token(per_turn: list[list[float]], turn_starts: list[list[int]], lengths: list[int]) -> list[list[float]]:
    """Each turn's value on every token from its start to the next turn's (the observation tokens between turns
    are the sample's loss mask's to leave out)."""
    advantages = []
    for values, starts, length in zip(per_turn, turn_starts, lengths):
        tokens = [0.0] * length
        for t, start in enumerate(starts):
            end = starts[t + 1] if t + 1 < len(starts) else length
            tokens[start:end] = [values[t]] * (end - start)
        advantages.append(tokens)
    return advantages


def turn_advantages(turn_rewards: list[list[float]], turn_starts: list[list[int]], lengths: list[int],
                    scale: bool = True, eps: float = 1e-4) -> list[list[float]]:
    """Per-token advantages for ONE group of multi-turn episodes: turn-level credit for per-step rewards (OpAgent's
    decision tree pays each step). Turn t of episode i is credited with its return from there on,
    G_it = r_it + r_i(t+1) + ..., centred on the mean of every G of the group (and divided by their std with
    ``scale``): a turn is good when what followed from it beat the group's turns. Every token of the turn, from
    its start to the next turn's, carries it. An episode's first turn's G is its whole reward."""
    _check_turns(turn_rewards, turn_starts, lengths)
    returns = [returns_to_go(rewards) for rewards in turn_rewards]
    flat = [g for episode in returns for g in episode]
    if not flat:
        return [[0.0] * n for n in lengths]
    mean = statistics.fmean(flat)
    factor = 1.0 / (statistics.stdev(flat) + eps) if scale and len(flat) > 1 else 1.0
    return _per_token([[(g - mean) * factor for g in episode] for episode in returns], turn_starts, lengths)


def step_group_advantages(turn_rewards: list[list[float]], turn_starts: list[list[int]], lengths: list[int],
                          states: list[list[Hashable]], scale: bool = True, weight: float = 1.0,
                          discount: float = 0.95, eps: float = 1e-4) -> list[list[float]]:
    """GiGPO's per-token advantages (Feng et al. 2025, "Group-in-Group Policy Optimization") for ONE group of
    multi-turn episodes of one task. Turn t of episode i gets A_i + ``weight`` x S_it, where
    - A_i is the episode's: its reward (the sum of its turns') against the group's, GRPO's advantage;
    - S_it is the step's: its discounted return from there on, r_it + discount * r_i(t+1) + ..., against the
      returns of the group's turns taken from the same state (``states[i][t]``, equal where the environment
      state was the same: the start, or a page two episodes reached by different actions).
    A state only one turn was taken from gives S 0: there is nothing to compare its action with. So every turn
    keeps the episode's credit, and turns from a shared state are ranked by what followed them, including
    the later turns that the pooled ``turn_advantages`` always compares with earlier ones. ``scale`` divides
    each by its group's std, as GRPO; without it, Dr.GRPO's centring alone."""
    _check_turns(turn_rewards, turn_starts, lengths)
    if len(states) != len(turn_rewards) or any(len(s) != len(r) for s, r in zip(states, turn_rewards)):
        raise ValueError("states must give one state per turn of every episode")
    rewards_B = torch.tensor([sum(rewards) for rewards in turn_rewards], dtype=torch.float64)
    episode = grpo_advantages(rewards_B, [len(turn_rewards)], scale, eps).tolist() if turn_rewards else []
    turns_at: dict[Hashable, list[tuple[int, int]]] = defaultdict(list)
    returns = [returns_to_go(rewards, discount) for rewards in turn_rewards]
    for i, episode_states in enumerate(states):
        for t, state in enumerate(episode_states):
            turns_at[state].append((i, t))
    step = [[0.0] * len(rewards) for rewards in turn_rewards]
    for members in turns_at.values():
        values = torch.tensor([returns[i][t] for i, t in members], dtype=torch.float64)
        for (i, t), value in zip(members, grpo_advantages(values, [len(members)], scale, eps).tolist()):
            step[i][t] = value
    per_turn = [[episode[i] + weight * s for s in step[i]] for i in range(len(turn_rewards))]
    return _per_token(per_turn, turn_starts, lengths)


def intra_tree_advantages(rewards: Sequence[float], roots: Sequence[int], scale: bool = True,
                          eps: float = 1e-4) -> list[float]:
    """Tree-GRPO's intra-tree term for ONE group of tree episodes (``episode.tree_roots``): GRPO's advantages
    (Dr.GRPO's without ``scale``) with the leaves sharing a root (``roots[i]``) as the group. A root's leaves sum to
    0, so the turns they share (the same tokens in every leaf, trained once per leaf) get none of it: it contrasts
    only what siblings did after they branched, a step-level preference."""
    if len(rewards) != len(roots):
        raise ValueError("rewards and roots must have one entry per sample")
    order = sorted(range(len(roots)), key=lambda i: roots[i])  # each root's leaves contiguous, as groups are
    leaves = Counter(roots)
    sizes = [leaves[root] for root in sorted(leaves)]
    within = grpo_advantages(torch.tensor([float(rewards[i]) for i in order]), sizes, scale, eps).tolist()
    advantages = [0.0] * len(rewards)
    for i, advantage in zip(order, within):
        advantages[i] = advantage
    return advantages
