"""Self-play with a transcript per player (SelfPlaySampler) and RAE's role baselines, on scripted policies.

The policy here is a character-level stand-in: a token is a character, ``<u>``/``<a>`` open user and
assistant messages, and each move is chosen by a rule from the player's own context, so every game is
known exactly. The real embedded model runs the same sampler in test_generators.py and test_pipeline_runs.py.
"""

import random
import re
from collections.abc import Callable

import pytest
import torch

from autotelic.algorithms import get_algorithm
from autotelic.backends import Completion
from autotelic.envs import make_game_factory
from autotelic.rollout.selfplay import SelfPlaySampler
from autotelic.tasks import get_family
from autotelic.types import Group, Sample, Task
from autotelic.update import RoleBaselines, _targets, role_of

EOS = 0
MOVE_LOGPROB = -0.5


class ScriptedPolicy:
    """Characters as tokens; ``choose(context)`` writes each move, seeing only the mover's own context."""

    version = 3

    def __init__(self, choose: Callable[[str], str]):
        self.choose = choose
        self.contexts: list[str] = []  # every context a move was asked for

    def encode_prompt(self, user_message: str, response_prefix: str = "") -> list[int]:
        return [ord(c) for c in f"<u>{user_message}<a>{response_prefix}"]

    def encode_followup(self, observation: str, after_eos: bool, response_prefix: str = "") -> list[int]:
        assert after_eos
        return [ord(c) for c in f"<u>{observation}<a>"]

    def encode_completion(self, text: str) -> list[int]:
        return [ord(c) for c in text] + [EOS]

    def decode(self, token_ids: list[int]) -> str:
        return "".join(chr(t) for t in token_ids if t != EOS)

    def generate(self, prompts: list[list[int]], n: int | list[int], max_new_tokens: int, temperature: float,
                 top_p: float = 1.0, greedy: bool = False, prefixes: object = None) -> list[list[Completion]]:
        outputs = []
        for prompt, size in zip(prompts, [n] * len(prompts) if isinstance(n, int) else n):
            context = self.decode(prompt)
            completions = []
            for _ in range(size):  # identical contexts (games that opened alike) come once with their count
                self.contexts.append(context)
                ids = [ord(c) for c in self.choose(context)] + [EOS]
                completions.append(Completion(ids[:max_new_tokens], [MOVE_LOGPROB] * len(ids[:max_new_tokens]),
                                              finished=len(ids) <= max_new_tokens))
            outputs.append(completions)
        return outputs


def first_legal_action(context: str) -> str:
    """Kuhn poker: the first action the player's latest list of legal actions offers."""
    return re.findall(r"Your available actions are: '(\[\w+\])'", context)[-1]


def _kuhn(seed: int) -> Task:
    return Task("", "", "ta_kuhn_poker", 1, f"kuhn#{seed}",
                meta={"env_id": "KuhnPoker-v0", "seed": seed, "env_kwargs": {"max_rounds": 1}})


def _sampler(choose: Callable[[str], str], max_turns: int = 6) -> tuple[SelfPlaySampler, ScriptedPolicy]:
    policy = ScriptedPolicy(choose)
    return SelfPlaySampler(policy, make_game_factory("textarena"), max_turns=max_turns), policy


def _transcript(policy: ScriptedPolicy, group: Group, sample: Sample) -> str:
    return policy.decode(group.prompt_ids + sample.token_ids)


def test_each_player_sees_only_its_own_card_and_its_own_moves_are_trained():
    # seed 0: Player 1 holds the K and opens, Player 0 the J; both play their first legal action
    sampler, policy = _sampler(first_legal_action)
    first, second = sampler.generate([_kuhn(0)], 2, 2000)
    assert [g.task.uid for g in (first, second)] == ["kuhn#0/p0", "kuhn#0/p1"]
    assert [g.task.meta["player"] for g in (first, second)] == [0, 1]
    for group, own, other in ((first, "J", "K"), (second, "K", "J")):
        assert f"Your card is: '{own}'" in group.task.prompt  # the role's view before any move
        for sample in group.samples:
            transcript = _transcript(policy, group, sample)
            assert f"Your card is: '{own}'" in transcript and f"'{other}'" not in transcript
            assert sample.info["player"] == group.task.meta["player"]
    assert all(f"'{card}'" not in c for c in policy.contexts if "Your card is: 'J'" in c for card in "KQ")
    # Player 1 checks, Player 0 checks: showdown, the K wins
    for p0, p1 in zip(first.samples, second.samples):
        assert (p0.reward, p1.reward) == (None, None)  # the Filter stage scores them, from info["return"]
        assert (p0.info["return"], p1.info["return"]) == (-1.0, 1.0)
        assert p0.info["turns"] == p1.info["turns"] == 1 and p0.info["invalid_actions"] == 0
        assert p0.text == p1.text == "[check]" and p0.info["end"] == p1.info["end"] == "game"
        assert p0.info["observations"][-1] == "Player 1 won by having more chips at the end of all 1 rounds."


def test_masks_cover_exactly_the_moves_and_observations_carry_no_logprob():
    # moves are asked for game by game within a round: Player 1 opens both games, then Player 0 answers
    moves = iter(["[bet]", "[check]", "[call]", "[bet]", "[fold]"])
    sampler, policy = _sampler(lambda context: next(moves))
    groups = sampler.generate([_kuhn(0)], 2, 2000)
    for group in groups:
        for sample in group.samples:
            mask = sample.loss_mask()
            assert len(mask) == len(sample.token_ids) == len(sample.logprobs)
            assert all(lp == (MOVE_LOGPROB if m else 0.0) for lp, m in zip(sample.logprobs, mask))
            assert policy.decode([t for t, m in zip(sample.token_ids, mask) if m]) == sample.text
    p0, p1 = groups
    assert [s.text for s in p1.samples] == ["[bet]", "[check][fold]"]
    assert [s.text for s in p0.samples] == ["[call]", "[bet]"]
    # game 1: the K wins the showdown; game 2: Player 1 folds to the bet
    assert [(a.info["return"], b.info["return"]) for a, b in zip(p0.samples, p1.samples)] == [(-1.0, 1.0), (1.0, -1.0)]
    # Player 0's first views differ in the opening it saw: that part starts each sample, masked
    shared = policy.decode(p0.prompt_ids)
    assert shared.startswith(f"<u>{p0.task.prompt}") and shared.endswith("Player 1, submitted move: '[")
    for sample, opening in zip(p0.samples, ("bet", "check")):
        head = policy.decode(sample.token_ids[:sample.loss_mask().index(1)])
        assert head.startswith(f"{opening}]'.") and head.endswith("<a>")
    assert policy.decode(p1.prompt_ids) == f"<u>{p1.task.prompt}<a>"  # the opener's first view is its intro


def test_rewards_of_a_games_two_players_sum_to_zero_over_many_deals():
    rng = random.Random(0)
    sampler, _ = _sampler(lambda context: rng.choice(["[check]", "[bet]", "[call]", "[fold]"]))
    tasks = [get_family("ta_kuhn_poker").generate(random.Random(seed), 1) for seed in range(4)]
    groups = sampler.generate(tasks, 3, 2000)
    assert len(groups) == 8 and all(len(g.samples) == 3 for g in groups)
    for p0, p1 in zip(groups[::2], groups[1::2]):
        assert p0.task.uid.removesuffix("/p0") == p1.task.uid.removesuffix("/p1")
        for a, b in zip(p0.samples, p1.samples):
            assert a.info["return"] + b.info["return"] == 0 and a.info["end"] == "game"
            assert {a.info["return"], b.info["return"]} <= {-1.0, 1.0}


def test_a_second_invalid_move_forfeits_and_the_waiting_player_never_moves():
    sampler, policy = _sampler(lambda context: "I fold")
    p0, p1 = sampler.generate([_kuhn(0)], 1, 2000)  # Player 1 opens, twice invalid
    loser, winner = p1.samples[0], p0.samples[0]
    assert (loser.info["return"], loser.info["turns"], loser.info["invalid_actions"]) == (-1.0, 2, 2)
    assert "attempted an invalid move" in _transcript(policy, p1, loser)
    assert (winner.info["return"], winner.info["turns"], winner.token_ids) == (1.0, 0, [])
    assert p0.prompt_ids == policy.encode_prompt(p0.task.prompt)  # nobody in this seat ever moved


def test_games_out_of_moves_are_draws_and_a_player_out_of_tokens_loses():
    sampler, _ = _sampler(lambda context: "[check]", max_turns=1)
    p0, p1 = sampler.generate([_kuhn(0)], 1, 2000)
    assert [s.info["return"] for s in (*p0.samples, *p1.samples)] == [0.0, 0.0]
    assert p1.samples[0].info["end"] == "max_turns" and p1.samples[0].finished

    # Player 1 opens with 40 characters and no move: cut at 30 tokens, then asked again with no room left
    sampler, _ = _sampler(lambda context: "x" * 40)
    p0, p1 = sampler.generate([_kuhn(0)], 1, 30)
    cut = p1.samples[0]
    assert not cut.finished and len(cut.token_ids) == 30 and cut.info["invalid_actions"] == 1
    assert (cut.info["return"], p0.samples[0].info["return"]) == (-1.0, 1.0)
    assert cut.info["end"] == p0.samples[0].info["end"] == "token_cap"

    # a cut move the game accepts plays on: Player 0's bet is cut but valid; Player 1 folds
    moves = iter(["[check]", "[bet]" + " " * 200, "[fold]"])
    sampler, _ = _sampler(lambda context: next(moves))
    p0, p1 = sampler.generate([_kuhn(0)], 1, 150)
    assert not p0.samples[0].finished and (p0.samples[0].info["return"], p0.samples[0].info["end"]) == (1.0, "game")

    # Player 1's view of the bet leaves it no room under a 60-token cap: it loses without moving again
    moves = iter(["[check]", "[bet]"])
    sampler, _ = _sampler(lambda context: next(moves))
    p0, p1 = sampler.generate([_kuhn(0)], 1, 60)
    squeezed = p1.samples[0]
    assert not squeezed.finished and squeezed.info["turns"] == 1 and len(squeezed.token_ids) > 60
    assert (squeezed.info["return"], squeezed.info["end"]) == (-1.0, "token_cap")


def test_tictactoe_groups_share_the_role_prompt_though_openings_differ():
    rng = random.Random(1)
    sampler, policy = _sampler(lambda context: f"[{rng.randrange(9)}]", max_turns=30)
    task = get_family("ta_tictactoe").generate(random.Random(0), 1)
    p0, p1 = sampler.generate([task], 4, 4000)
    second_views = {s.info["observations"][0] for s in p1.samples}
    assert len(second_views) > 1  # Player 1's first view depends on Player 0's opening
    assert policy.decode(p1.prompt_ids).startswith(f"<u>{p1.task.prompt}")
    for group in (p0, p1):
        for sample in group.samples:
            assert policy.decode(group.prompt_ids + sample.token_ids).startswith("<u>")
            assert sample.info["observations"][0] in _transcript(policy, group, sample)
    assert all(a.info["return"] + b.info["return"] == 0 for a, b in zip(p0.samples, p1.samples))


# ---- RAE: role baselines across steps --------------------------------------------------------

def _scored(family: str, rewards_per_player: list[tuple[float, float]]) -> list[Group]:
    """A game's two role groups, each game's samples in order, rewards already filled in."""
    task = Task("", "", family, 1, family)
    return [Group(task, [1], [Sample("x", [5, 6], [0.0, 0.0], True, reward=game[role], info={"player": role})
                              for game in rewards_per_player]) for role in (0, 1)]


def test_role_baselines_give_hand_computed_advantages_and_carry_over_steps():
    baselines = RoleBaselines(decay=0.5)
    groups = _scored("ta_kuhn_poker", [(1.0, -1.0), (-1.0, 1.0)])  # batch order: p0 g1, p0 g2, p1 g1, p1 g2
    targets = _targets(groups, get_algorithm("spiral"), baselines)
    # p0: A = 1 - 0 = 1, b = 0.5; A = -1 - 0.5 = -1.5, b = 0.25 - 0.5 = -0.25. p1 mirrors it.
    assert targets.advantages == pytest.approx([1.0, -1.5, -1.0, 1.5])
    assert baselines.values == pytest.approx({"ta_kuhn_poker/p0": -0.25, "ta_kuhn_poker/p1": 0.25})
    assert targets.masks == [[1, 1]] * 4
    # the next step starts from those baselines; another game keeps its own
    more = _scored("ta_kuhn_poker", [(1.0, -1.0)]) + _scored("ta_tictactoe", [(0.0, 0.0)])
    assert _targets(more, get_algorithm("spiral"), baselines).advantages == pytest.approx([1.25, -1.25, 0.0, 0.0])
    assert baselines.values["ta_kuhn_poker/p0"] == pytest.approx(0.375)
    assert baselines.metrics()["train/role_baseline/ta_tictactoe/p1"] == 0.0


def test_role_baselines_state_round_trip():
    baselines = RoleBaselines(decay=0.9)
    _targets(_scored("ta_kuhn_poker", [(1.0, -1.0)] * 3), get_algorithm("spiral"), baselines)
    restored = RoleBaselines(decay=0.9)
    restored.load_state_dict(baselines.state_dict())
    assert restored == baselines and restored.values is not baselines.values
    step = _scored("ta_kuhn_poker", [(-1.0, 1.0)])
    assert _targets(step, get_algorithm("spiral"), restored).advantages == \
        _targets(step, get_algorithm("spiral"), baselines).advantages


def test_role_is_game_and_seat_and_the_family_alone_outside_self_play():
    task = Task("q", "1", "add", 1, "u")
    assert role_of(Group(task, [1], []), Sample("x", [], [], True)) == "add"
    assert role_of(Group(task, [1], []), Sample("x", [], [], True, info={"player": 1})) == "add/p1"
    with pytest.raises(ValueError, match="needs the run's RoleBaselines"):
        _targets(_scored("add", [(1.0, 0.0)]), get_algorithm("spiral"))


def test_rae_advantages_is_pure_and_checks_its_inputs():
    from autotelic.algorithms import rae_advantages

    before = {"a": 1.0}
    advantages, after = rae_advantages(torch.tensor([1, 0]), ["a", "b"], before, decay=0.0)
    assert advantages.tolist() == [0.0, 0.0] and advantages.dtype == torch.float32
    assert after == {"a": 1.0, "b": 0.0} and before == {"a": 1.0}
    with pytest.raises(ValueError, match="1 roles for 2 rewards"):
        rae_advantages(torch.tensor([1.0, 0.0]), ["a"], {}, 0.9)


def test_a_fixed_opponent_plays_the_other_seat_and_only_the_policys_seats_form_groups():
    policy, opponent = ScriptedPolicy(lambda context: "[bet]"), ScriptedPolicy(first_legal_action)
    sampler = SelfPlaySampler(policy, make_game_factory("textarena"), max_turns=6, opponent=opponent)
    groups = sampler.generate([_kuhn(0), _kuhn(1)], 4, 2000)
    # the policy sits in seat 0 in games 0 and 2, in seat 1 in games 1 and 3: a group per task and seat
    assert [g.task.uid for g in groups] == ["kuhn#0/p0", "kuhn#0/p1", "kuhn#1/p0", "kuhn#1/p1"]
    assert all(len(g.samples) == 2 for g in groups)
    assert all(s.text.startswith("[bet]") for g in groups for s in g.samples)  # only the policy's own moves
    # the policy was asked for exactly its own seats' moves; the opponent for the rest
    assert len(policy.contexts) == sum(s.info["turns"] for g in groups for s in g.samples)
    assert len(opponent.contexts) >= 8  # at least one move in each of the 8 games


def test_a_rule_opponent_plays_kuhn_poker_by_its_cards():
    from autotelic.tasks.textarena_games import KUHN_CARDS, TextArenaGame, kuhn_poker_rules

    policy = ScriptedPolicy(lambda context: "[bet]")
    sampler = SelfPlaySampler(policy, make_game_factory("textarena"), max_turns=6, rules=kuhn_poker_rules)
    tasks = [_kuhn(seed) for seed in range(12)]
    groups = sampler.generate(tasks, 2, 2000)
    assert len(policy.contexts) == sum(s.info["turns"] for g in groups for s in g.samples)  # only its own seats
    outcomes = set()
    for group in groups:
        deal = TextArenaGame()
        deal.reset(next(t for t in tasks if t.uid == group.task.uid.split("/")[0]))
        cards = {p: KUHN_CARDS[c] for p, c in deal.game.state.game_state["player_cards"].items()}
        for sample in group.samples:
            mine, theirs = cards[sample.info["player"]], cards[1 - sample.info["player"]]
            # always betting beats the rules' jack (it folds) and loses to their king (it bets or calls); against
            # the queen, which calls, the showdown decides
            assert sample.info["return"] == (1.0 if theirs == "J" or mine == "K" else -1.0), (mine, theirs)
            outcomes.add((mine, theirs))
    assert len(outcomes) == 6  # every deal, from either seat
    with pytest.raises(ValueError, match="one fixed opponent"):
        SelfPlaySampler(policy, make_game_factory("textarena"), opponent=policy, rules=kuhn_poker_rules)
