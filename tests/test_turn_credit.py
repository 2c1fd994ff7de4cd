"""Turn-level credit for multi-turn episodes (OpAgent's per-step rewards): rewards split per turn, returns from
each turn on, per-token advantages, the zero-variance filter that sees turns, and the checks around it; and the
intra-tree term of episode trees (Tree-GRPO)."""

import pytest

from autotelic.algorithms import get_algorithm, intra_tree_advantages, step_group_advantages, turn_advantages
from autotelic.rewards.web import WebProgress, WebSuccess
from autotelic.rollout.filter import EnvReturn, ZeroVarianceFilter, weighted_scorer
from autotelic.types import Group, Sample, Task
from autotelic.turn_credit import TurnCredit, later_turns_sharing_a_state, turn_states
from autotelic.update import _targets, with_intra_tree

TASK = Task("Buy the blue mug.", "", "web_shop", 1, "web_shop:x")


def _episode(steps: list[dict], starts: list[int], length: int, step_rewards: list[float] | None = None) -> Sample:
    info = {"steps": steps, "turn_starts": starts, "turns": len(starts), "return": sum(step_rewards or []),
            "step_rewards": step_rewards or [0.0] * len(starts)}
    mask = [1] * length
    for start in starts[1:]:  # two observation tokens before every turn but the first
        mask[start - 2:start] = [0, 0]
    return Sample("", list(range(length)), [0.0] * length, True, mask=mask, info=info)


VALID = {"valid": True, "url_changed": True}
STUCK = {"valid": True, "page_changed": False}
INVALID = {"valid": False}


def _milestones(step: dict, reached: int, success: bool = False) -> dict:
    return {**step, "milestones": reached, "milestones_total": 2, "success": success}


def test_turn_advantages_by_hand():
    # episode a: rewards [0, 1] -> returns [1, 1]; episode b: [-1, 0, 0] -> [-1, 0, 0]; mean 1/5, no scaling
    advantages = turn_advantages([[0.0, 1.0], [-1.0, 0.0, 0.0]], [[0, 3], [0, 2, 4]], [5, 6], scale=False)
    assert advantages == [pytest.approx([0.8] * 3 + [0.8] * 2), pytest.approx([-1.2] * 2 + [-0.2] * 2 + [-0.2] * 2)]
    scaled = turn_advantages([[0.0, 1.0], [-1.0, 0.0, 0.0]], [[0, 3], [0, 2, 4]], [5, 6])
    std = (sum((g - 0.2) ** 2 for g in (1, 1, -1, 0, 0)) / 4) ** 0.5
    assert scaled[0][0] == pytest.approx(0.8 / (std + 1e-4))
    with pytest.raises(ValueError, match="2 turn rewards for 1 turns"):
        turn_advantages([[0.0, 1.0]], [[0]], [3])


def test_step_group_advantages_by_hand():
    """GiGPO: the episode's advantage on every turn, plus each turn's discounted return against the returns of the
    turns taken from the same state. Three episodes start at s0; a and b reach page p, c reaches page q."""
    rewards = [[0.0, 1.0], [0.0, 0.0], [0.0, 1.0]]
    states = [[None, "p"], [None, "p"], [None, "q"]]
    advantages = step_group_advantages(rewards, [[0, 2], [0, 2], [0, 2]], [4, 4, 4], states, scale=False,
                                       weight=0.5, discount=0.9)
    # episodes: rewards 1, 0, 1, mean 2/3 -> 1/3, -2/3, 1/3
    # start: returns 0.9, 0, 0.9, mean 0.6 -> 0.3, -0.6, 0.3; page p: returns 1, 0 -> 0.5, -0.5; page q alone: 0
    assert advantages == [pytest.approx([1 / 3 + 0.15] * 2 + [1 / 3 + 0.25] * 2),
                          pytest.approx([-2 / 3 - 0.3] * 2 + [-2 / 3 - 0.25] * 2),
                          pytest.approx([1 / 3 + 0.15] * 2 + [1 / 3] * 2)]
    # the pooled baseline ranks b's second turn (return 0) under every first turn of the group, a state
    # baseline against a's alone; with scale, each term is divided by its own group's std
    scaled = step_group_advantages(rewards, [[0, 2], [0, 2], [0, 2]], [4, 4, 4], states, weight=1.0, discount=1.0)
    episode_std, page_std = (1 / 3) ** 0.5, 0.5 ** 0.5
    assert scaled[0][2] == pytest.approx((1 / 3) / (episode_std + 1e-4) + 0.5 / (page_std + 1e-4))
    with pytest.raises(ValueError, match="one state per turn"):
        step_group_advantages(rewards, [[0, 2], [0, 2], [0, 2]], [4, 4, 4], [[None], [None, "p"], [None, "q"]])


def test_turn_states_are_the_start_then_the_state_each_step_left():
    named = _episode([{**VALID, "state": "page-2"}, {**STUCK, "state": "page-2"}, VALID], [0, 4, 8], 12)
    named.info["observations"] = ["Page two", "(the page did not change)", "episode over"]
    assert turn_states(named) == [None, "page-2", "page-2"]
    unnamed = _episode([VALID, VALID], [0, 4], 8)  # an environment that names no state: its observation
    unnamed.info["observations"] = ["You guessed 5: too high.", "You guessed 3: too low."]
    assert turn_states(unnamed) == [None, "You guessed 5: too high."]


def test_web_progress_pays_each_step_its_share_and_the_shares_sum_to_the_reward():
    progress = WebProgress(step_penalty=0.1, milestone_weight=0.5)
    sample = _episode([_milestones(VALID, 1), _milestones(INVALID, 1), _milestones(STUCK, 2)], [0, 4, 8], 12)
    assert progress.turn_values(sample) == pytest.approx([0.25, -0.1, -0.1 + 0.25])
    assert progress(Group(TASK, [0], [sample])) == pytest.approx([0.3])


def test_the_scorer_splits_each_episodes_reward_over_its_turns():
    """web_progress pays per turn; web_success and the env return (step rewards) as they come: the outcome on the
    last turn, each step's reward on its turn; weights apply; the turns sum to the reward."""
    won = _episode([_milestones(VALID, 1), _milestones(VALID, 2, success=True)], [0, 4], 8, [0.0, 1.0])
    lost = _episode([_milestones(INVALID, 0), _milestones(STUCK, 0)], [0, 4], 8, [0.0, 0.0])
    group = Group(TASK, [0], [won, lost])
    scorer = weighted_scorer([(WebSuccess(), 1.0), (WebProgress(0.1, 0.5), 2.0), (EnvReturn(), 0.5)])
    rewards = scorer(group)
    assert won.info["turn_rewards"] == pytest.approx([2 * 0.25, 1.0 + 2 * 0.25 + 0.5])
    assert lost.info["turn_rewards"] == pytest.approx([2 * -0.1, 2 * -0.1])
    assert [sum(s.info["turn_rewards"]) for s in group.samples] == pytest.approx(rewards)
    # a return set apart from its steps' rewards (a proposer's executor is paid by vote): all of it on the last turn
    voted = _episode([VALID, VALID], [0, 4], 8, [0.0, 0.0])
    voted.info["return"] = 1.0
    weighted_scorer([(EnvReturn(), 1.0), (WebSuccess(), 0.0)])(Group(TASK, [0], [voted]))
    assert voted.info["turn_rewards"] == [0.0, 1.0]


def test_a_single_outcome_reward_is_split_over_turns_too():
    """The success check alone (the web benches' reward): the outcome on each episode's last turn, so turn credit
    has turns to credit; a single-turn sample gets none."""
    won = _episode([_milestones(VALID, 1), _milestones(VALID, 2, success=True)], [0, 4], 8)
    lost = _episode([_milestones(INVALID, 0)], [0], 4)
    plain = Sample("a", [1, 2], [0.0, 0.0], True)
    group = Group(TASK, [0], [won, lost, plain])
    assert weighted_scorer([(WebSuccess(), 1.0)])(group) == [1.0, 0.0, 0.0]
    assert won.info["turn_rewards"] == [0.0, 1.0] and lost.info["turn_rewards"] == [0.0]
    assert "turn_rewards" not in plain.info


def test_a_reward_that_scores_too_few_samples_is_named_before_turns_are_split():
    def short(group: Group) -> list[float]:
        return [1.0]

    episodes = [_episode([VALID, VALID], [0, 4], 8), _episode([VALID], [0], 4)]
    with pytest.raises(ValueError, match="^short returned 1 rewards for 2 samples$"):
        weighted_scorer([(short, 1.0)])(Group(TASK, [0], episodes))


def test_zero_variance_by_turn_keeps_equal_episodes_whose_turns_differ():
    episodes = [_episode([VALID, INVALID], [0, 4], 8), _episode([VALID, INVALID], [0, 4], 8)]
    for sample in episodes:
        sample.reward, sample.info["turn_rewards"] = -0.1, [-0.1, 0.0]  # returns from each turn: -0.1, 0
    group = Group(TASK, [0], episodes)
    assert not ZeroVarianceFilter().keep(group) and ZeroVarianceFilter(TurnCredit()).keep(group)


def test_with_state_groups_a_group_is_kept_exactly_where_some_turn_has_an_advantage():
    """Every episode solved in three turns through the same pages: discounted returns differ from turn to turn
    (0.9025, 0.95, 1) but not within any state, and every episode's reward is the same: nothing to learn."""
    def solved(pages: list[str]) -> Sample:  # one turn per page, the reward on the last
        sample = _episode([{**VALID, "state": page} for page in pages], list(range(0, 4 * len(pages), 4)),
                          4 * len(pages))
        sample.reward, sample.info["turn_rewards"] = 1.0, [0.0] * (len(pages) - 1) + [1.0]
        return sample

    alike = Group(TASK, [0], [solved(["p", "q", "end"]) for _ in range(4)])
    states = ZeroVarianceFilter(TurnCredit("state", discount=0.95))
    assert not states.keep(alike) and not ZeroVarianceFilter(TurnCredit()).keep(alike)
    # one episode reached q through another page, one turn later: from the start, its return is lower
    detour = Group(TASK, [0], [solved(["p", "q", "end"]) for _ in range(3)] + [solved(["r", "s", "q", "end"])])
    assert states.keep(detour) and not ZeroVarianceFilter(TurnCredit()).keep(detour)


def test_the_update_credits_turns_where_a_group_has_them_and_episodes_elsewhere():
    spec = get_algorithm("grpo")
    episodes = [_episode([VALID, VALID], [0, 4], 8), _episode([STUCK, STUCK], [0, 4], 8)]
    for sample, turns in zip(episodes, ([0.5, 0.5], [-0.1, -0.1])):
        sample.reward, sample.info["turn_rewards"] = sum(turns), turns
    plain = [Sample("a", [1, 2], [0.0, 0.0], True, reward=r) for r in (1.0, 0.0)]
    groups = [Group(TASK, [0], episodes), Group(Task("q", "1", "add", 1, "add:q"), [0], plain)]
    targets = _targets(groups, spec, turn_credit=TurnCredit())
    expected = turn_advantages([[0.5, 0.5], [-0.1, -0.1]], [[0, 4], [0, 4]], [8, 8])
    assert targets.advantages[:2] == expected and expected[0][0] > expected[0][5]  # turn 1's return holds turn 2's
    assert targets.advantages[2:] == pytest.approx(_targets(groups[1:], spec).advantages)  # no turns: per episode
    assert targets.masks[1] == [1, 1, 0, 0, 1, 1, 1, 1]  # observation tokens stay out of the loss
    assert len(set(_targets(groups, spec).advantages[:2])) == 2  # without turn credit: one number per episode


def test_the_update_compares_turns_from_the_same_state_with_turn_baseline_state():
    spec = get_algorithm("grpo")
    rewards = {"a": [0.0, 1.0], "b": [0.0, 0.0], "c": [0.0, 1.0]}
    episodes = [_episode([{**VALID, "state": page}, VALID], [0, 4], 8) for page in ("p", "p", "q")]
    for sample, turns in zip(episodes, rewards.values()):
        sample.reward, sample.info["turn_rewards"] = sum(turns), turns
    group = Group(TASK, [0], episodes)
    credit = TurnCredit("state", weight=1.0, discount=0.95)
    expected = step_group_advantages(list(rewards.values()), [[0, 4]] * 3, [8] * 3, [[None, "p"], [None, "p"],
                                     [None, "q"]], scale=True, weight=1.0, discount=0.95)
    assert _targets([group], spec, turn_credit=credit).advantages == expected
    assert expected != _targets([group], spec, turn_credit=TurnCredit()).advantages
    assert expected[0][4] > expected[2][4]  # a's second turn beat b's from the same page; c's had no peer
    assert later_turns_sharing_a_state([group]) == pytest.approx(2 / 3)  # a's and b's second turns; not c's


def test_one_micro_batch_trains_turn_credited_episodes_beside_plain_samples():
    """Per-token advantages (turn credit) and one number per sample (a group without turns) in one micro-batch."""
    import math

    import torch

    from autotelic.backends.hf import HFPolicy
    from autotelic.config import AlgorithmConfig, ModelConfig
    from autotelic.update import policy_gradient_update

    policy = HFPolicy(ModelConfig(path="random:qwen2-tiny", lora=False, threads=1), lr=1e-3, seed=0)
    episodes = [_episode([VALID, VALID], [0, 4], 8), _episode([STUCK, STUCK], [0, 4], 8)]
    for sample, turns in zip(episodes, ([0.5, 0.5], [-0.1, -0.1])):
        sample.reward, sample.info["turn_rewards"] = sum(turns), turns
    plain = [Sample("a", [1, 2], [0.0, 0.0], True, reward=r) for r in (1.0, 0.0)]
    groups = [Group(TASK, [0], episodes), Group(Task("q", "1", "add", 1, "add:q"), [0], plain)]
    before = [p.detach().clone() for p in policy.trainable]
    metrics = policy_gradient_update(policy, groups, get_algorithm("grpo"), AlgorithmConfig(turn_credit=True), 1.0, 8)
    assert math.isfinite(metrics["train/loss"]) and metrics["train/trained_tokens"] == 6 + 6 + 2 + 2
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.trainable))


def test_the_intra_tree_term_cancels_on_the_turns_siblings_share():
    """algorithm.intra_tree: each episode also gets its reward against the leaves of its own root (Tree-GRPO). Over a
    root's leaves it sums to 0 on every token they share, so the turns before the branch point keep their summed
    turn-credit advantage and only what the siblings did after branching is contrasted."""
    assert intra_tree_advantages([1.0, 0.0, 0.0, 0.0, 0.5], [0, 1, 0, 1, 0], scale=False) == [0.5, 0, -0.5, 0, 0]
    scaled = intra_tree_advantages([1.0, 0.0, 0.0, 0.0, 0.5], [0, 1, 0, 1, 0])
    assert scaled[0] == pytest.approx(0.5 / (0.5 + 1e-4)) and scaled[1] == scaled[3] == 0
    # roots a and b; a copied after turn 1 (c), and c copied again (d); b's copy (e) ended with it
    rewards = {"a": [0.0, 1.0], "b": [0.0, 0.0], "c": [0.0, 0.0], "d": [0.0, 0.5], "e": [0.0, 0.0]}
    episodes = [_episode([VALID, VALID], [0, 4], 8) for _ in rewards]
    for sample, (name, turns) in zip(episodes, rewards.items()):
        sample.reward, sample.info["turn_rewards"] = sum(turns), turns
        if name in "ced":
            sample.info["forked"] = {"from": {"c": 0, "e": 1, "d": 2}[name], "after_turn": 1}
    group = Group(TASK, [0], [episodes[i] for i in (0, 1, 2, 4, 3)])  # a, b, c, e, d: a copy after its parent
    spec = get_algorithm("dr_grpo")
    plain = _targets([group], spec, turn_credit=TurnCredit())
    tree = with_intra_tree(plain, [group], scale=False)
    added = [[t - p for t, p in zip(row, base)] for row, base in zip(tree.advantages, plain.advantages)]
    assert [row[0] for row in added] == pytest.approx([0.5, 0.0, -0.5, 0.0, 0.0]) and added[0] == [0.5] * 8
    shared = range(4)  # turn 1: the same tokens in a, c and d
    assert [sum(tree.advantages[i][t] for i in (0, 2, 4)) for t in shared] == pytest.approx(
        [sum(plain.advantages[i][t] for i in (0, 2, 4)) for t in shared])
    assert tree.masks == plain.masks


@pytest.mark.parametrize("overrides, message", [
    (["algorithm.turn_credit=true"], "generate.mode=sample steps no environment"),
    (["algorithm.turn_credit=true", "generate.mode=episode", "generate.env=guess_number", "algorithm.name=rloo",
      "filter.rewards=[{name: env}]", "curriculum.families=[guess_number]"], "not rloo"),
    (["algorithm.intra_tree=true", "generate.mode=episode", "generate.env=guess_number",
      "curriculum.families=[guess_number]"], "algorithm.intra_tree adds Tree-GRPO's intra-tree term to the advantages "
                                             "of episode trees: set episode.tree_roots > 0"),
    (["algorithm.turn_baseline=state", "generate.mode=episode", "generate.env=guess_number",
      "curriculum.families=[guess_number]"], "algorithm.turn_baseline=state sets what turn credit compares each turn "
                                             "with, and turn credit is off: set algorithm.turn_credit=true"),
    (["algorithm.step_discount=1.5"], "algorithm.step_discount"),
    (["algorithm.turn_credit=true", "generate.mode=episode", "generate.env=guess_number", "algorithm.step_weight=0.5",
      "curriculum.families=[guess_number]"], "^algorithm.step_weight applies only to GiGPO's step groups, which are "
                                             "off: set algorithm.turn_baseline=state"),
])
def test_turn_credit_is_refused_where_it_cannot_work(overrides, message):
    from autotelic.checks import TrainingError, check_run
    from autotelic.config import ConfigError
    from autotelic.loading import load_config

    with pytest.raises((ConfigError, TrainingError), match=message):
        check_run(load_config(None, overrides))
