"""CoMAS discussions (rollout/discussion.py): reward assignment, role rotation and prompts on hand-built
discussions, the sampler on scripted character-level agents, config checks; one real-model run (slow)."""

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from autotelic.algorithms import get_algorithm
from autotelic.backends import Completion
from autotelic.config import ConfigError
from autotelic.loading import load_config
from autotelic.rewards.judge import parse_tagged_score
from autotelic.rollout.discussion import (
    EVALUATOR,
    ROLES,
    SCORER,
    SOLVER,
    Discussion,
    DiscussionSampler,
    Turn,
    discussion_metrics,
    evaluate_discussion,
    reward_round,
    role_groups,
    round_rewards,
    seats,
)
from autotelic.checks import TrainingError, check_combination
from autotelic.types import Sample, Task

TASK = Task("What is 3 + 4? Reply with only the number.", "7", "add", 1, "add#1")
COMAS = ["generate.mode=discussion", "filter.rewards=[{name: env}]", "curriculum.name=uniform"]


# ---- rewards ------------------------------------------------------------------------------------
@pytest.mark.parametrize("reply, grade, solver", [
    ("<score>3</score>", 3.0, 1.0), ("Minor slip. <score>2</score>", 2.0, 0.5),
    ("2 is wrong, 3 is too. <score> 1 </score>", 1.0, 0.0), ("<score>3</score> no, <score>2</score>", 2.0, 0.5)])
def test_the_solver_earns_the_normalised_grade_the_evaluator_its_complement(reply, grade, solver):
    rewards = round_rewards(reply, 1, 3, unparsed_penalty=-1.0)
    assert rewards.grade == grade
    assert rewards.returns == (solver, 1.0 - solver, 0.0)


@pytest.mark.parametrize("reply", ["", "correct", "<score>5</score>", "<score>0</score>", "3",
                                   "1. The answer is incorrect", "Grade: 2", "<score>2"])
def test_an_unreadable_grade_penalises_the_scorer_and_rewards_nobody_else(reply):
    for penalty in (-1.0, 0.0):
        rewards = round_rewards(reply, 1, 3, penalty)
        solver, evaluator, scorer = rewards.returns
        assert rewards.grade is None and math.isnan(solver) and math.isnan(evaluator) and scorer == penalty


@pytest.mark.parametrize("grade, agrees, scorer", [(3, True, 1.0), (3, False, 0.0), (1, False, 1.0),
                                                  (2, True, 0.5), (1, True, 0.0)])
def test_with_consensus_a_readable_grade_pays_the_scorer_for_tracking_the_vote(grade, agrees, scorer):
    rewards = round_rewards(f"<score>{grade}</score>", 1, 3, -1.0, agrees)
    assert rewards.returns[SCORER] == scorer and rewards.returns[SOLVER] == (rewards.grade - 1) / 2
    assert round_rewards("so so", 1, 3, -1.0, agrees).returns[SCORER] == -1.0


# ---- roles --------------------------------------------------------------------------------------
def test_seats_rotate_so_every_agent_plays_every_role_and_never_judges_its_own_work():
    for agents in (3, 4):
        played = set()
        for t in range(agents):
            for r, d, j in ((0, 0, 0), (1, 1, 2), (0, 1, 1)):
                solver, evaluator, scorer = seats(t, r, d, j, agents)
                assert len({solver, evaluator, scorer}) == 3  # nobody critiques or grades its own answer
                played |= {(solver, SOLVER), (evaluator, EVALUATOR), (scorer, SCORER)}
        assert played == {(a, role) for a in range(agents) for role in range(3)}
    # a task's exchanges spread the solver seat over the agents: each agent solves once per round here
    assert sorted(seats(0, 0, 0, j, 3)[SOLVER] for j in range(3)) == [0, 1, 2]
    assert seats(5, 7, 1, 2, 1) == (0, 0, 0)  # one agent plays every role (the single-agent ablation)


def test_fixed_roles_keep_each_agent_in_its_seat_and_share_a_seat_held_twice():
    fixed = ("scorer", "solver", "evaluator")
    assert {seats(t, r, d, j, 3, fixed) for t in range(3) for r in range(2) for d in range(2) for j in range(3)} \
        == {(1, 2, 0)}
    shared = ("solver", "evaluator", "scorer", "solver")  # agents 0 and 3 take turns at solving
    solvers = [seats(t, 0, 0, j, 4, shared)[SOLVER] for t in range(2) for j in range(3)]
    assert set(solvers) == {0, 3} and {seats(t, 0, 0, 0, 4, shared)[SCORER] for t in range(4)} == {2}
    agents = [ScriptedAgent("7"), ScriptedAgent("8"), ScriptedAgent("9")]
    groups = DiscussionSampler(agents, rounds=2, solutions=3, roles=fixed).generate([TASK], 2, max_new_tokens=16)
    assert {(s.info["role"], s.info["agent"]) for g in groups for s in g.samples} == \
        {("scorer", 0), ("solver", 1), ("evaluator", 2)}


# ---- hand-built discussions ------------------------------------------------------------------------
def _turn(agent: int, text: str, prompt: list[int], message: str = "") -> Turn:
    return Turn(agent, message, prompt, Sample(text=text, token_ids=[9, 9], logprobs=[-0.1, -0.2], finished=True))


def _round(discussion: Discussion, exchanges: list[tuple[str, str, str]], prompts: list[list[list[int]]],
           r: int) -> None:
    """Round ``r`` of ``discussion``: each exchange's (answer, critique, grade) played by its seats."""
    discussion.rounds.append([[_turn(a, text, prompt) for a, text, prompt in
                               zip(seats(discussion.task_index, r, discussion.index, j, 3), texts, prompts[j])]
                              for j, texts in enumerate(exchanges)])
    reward_round(discussion, r, 1, 3, unparsed_penalty=-1.0)


def test_a_later_solver_sees_earlier_answers_and_critiques_and_the_other_roles_see_the_current_answer():
    discussion = Discussion(TASK, 0, 0)
    assert discussion.message(SOLVER, 0, 2, 1, 3) == TASK.prompt  # round 0: the task as it is
    _round(discussion, [("8", "3 + 4 is 7, not 8.", "1"), ("7", "Correct.", "3"), ("6", "Too small.", "1")],
           [[[1]] * 3] * 3, 0)
    discussion.rounds.append([[] for _ in range(3)])
    message = discussion.message(SOLVER, 1, 2, 1, 3)  # exchange 1 is shown exchanges 1 and 2 of round 0
    for text in ("1. Answer: 7", "Review: Correct.", "2. Answer: 6", "Review: Too small."):
        assert text in message
    assert message.startswith(TASK.prompt) and "Answer: 8" not in message and "Grade" not in message
    assert "Answer: 8" in discussion.message(SOLVER, 0, 2, 1, 3) and "Answer: 6" not in discussion.message(
        SOLVER, 0, 1, 1, 3)
    discussion.rounds[-1][1].append(_turn(2, "7", [1]))
    assert "Proposed answer: 7" in discussion.message(EVALUATOR, 1, 2, 1, 3)
    discussion.rounds[-1][1].append(_turn(0, "It is right.", [1]))
    scorer = discussion.message(SCORER, 1, 2, 1, 3)
    assert "Proposed answer: 7" in scorer and "Review: It is right." in scorer and "from 1 (wrong) to 3" in scorer


def test_each_role_is_rewarded_from_its_exchanges_grade_in_groups_per_agent():
    # two discussions of one task, one exchange a round, three agents; round 1's grade is unreadable in discussion 1
    discussions = [Discussion(TASK, 0, d) for d in range(2)]
    _round(discussions[0], [("8", "Wrong.", "<score>1</score>")], [[[1, 2, 3], [1, 4], [1, 5]]], 0)
    _round(discussions[1], [("7", "Fine.", "<score>3</score>")], [[[1, 2, 3], [1, 4, 6], [1, 5]]], 0)
    _round(discussions[0], [("7", "Fine.", "<score>2</score>")], [[[1, 7, 8], [1, 4], [1, 5]]], 1)
    _round(discussions[1], [("7", "Fine.", "hmm, 2")], [[[1, 7, 9], [1, 4], [1, 5]]], 1)
    groups = [g for r in range(2) for role in range(3) for g in role_groups(discussions, r, role)]
    for group in groups:  # one agent per group, the seat of that role in each of its exchanges
        r, role = group.task.meta["round"], ROLES.index(group.task.meta["role"])
        assert all(s.info["agent"] == group.task.meta["agent"] and s.info["round"] == r for s in group.samples)
        assert {seats(0, r, int(s.info["discussion"].split("#")[-1]), 0, 3)[role] for s in group.samples} == \
            {group.task.meta["agent"]}
    returns = {(s.info["discussion"], s.info["round"], s.info["role"]): s.info["return"]
               for g in groups for s in g.samples}
    assert [returns[f"{TASK.uid}#{d}", 0, "solver"] for d in range(2)] == [0.0, 1.0]
    assert [returns[f"{TASK.uid}#{d}", 0, "evaluator"] for d in range(2)] == [1.0, 0.0]  # zero-sum
    assert [returns[f"{TASK.uid}#{d}", 1, "scorer"] for d in range(2)] == [0.0, -1.0]
    assert returns[f"{TASK.uid}#0", 1, "solver"] == 0.5 and math.isnan(returns[f"{TASK.uid}#1", 1, "solver"])
    unrewarded = [g for g in groups if math.isnan(g.samples[0].info["return"])]
    assert {g.task.meta["role"] for g in unrewarded} == {"solver", "evaluator"}  # apart, for the Filter to drop
    assert all(len(g.samples) == 1 for g in unrewarded)
    # round 1's solvers are different agents in the two discussions: groups of one, prompts whole
    (solver,) = [g for g in groups if g.task.meta["round"] == 1 and g.task.meta["role"] == "solver"
                 and g.samples[0].info["discussion"].endswith("#0")]
    assert solver.prompt_ids == [1, 7, 8] and solver.samples[0].loss_mask() == [1, 1]
    metrics = discussion_metrics(groups)
    assert metrics["discussion/grade_parse_rate"] == 0.75
    assert metrics["discussion/solver_accuracy"] == 0.75  # three of the four answers are 7
    assert metrics["discussion/solver_reward"] == pytest.approx(0.5)


def test_turns_of_one_agent_share_their_prompt_prefix_and_the_rest_starts_each_sample_masked():
    discussions = [Discussion(TASK, 0, d) for d in range(3)]  # 3 discussions x 3 exchanges: 3 per agent and role
    for d in discussions:
        _round(d, [("7", "Fine.", "3")] * 3, [[[1, 2], [1, 4, d.index + 10], [1, 5]]] * 3, 0)
    evaluators = role_groups(discussions, 0, EVALUATOR)
    assert sorted(g.task.meta["agent"] for g in evaluators) == [0, 1, 2] and all(len(g.samples) == 3
                                                                                 for g in evaluators)
    group = evaluators[0]
    assert group.prompt_ids == [1, 4]
    assert all(s.loss_mask() == [0, 1, 1] and s.logprobs == [0.0, -0.1, -0.2] for s in group.samples)
    assert sorted(s.token_ids[0] for s in group.samples) == [10, 11, 12]


# ---- the sampler, on scripted agents ----------------------------------------------------------------
class ScriptedAgent:
    """Characters as tokens. Solvers answer ``answer``; evaluators say "Check it."; scorers grade 3 for
    the answer 7, 1 for any other, and agent ``mumbles`` writes no grade at all."""

    def __init__(self, answer: str, mumbles: bool = False):
        self.answer, self.mumbles, self.version = answer, mumbles, 0
        self.asked: list[str] = []

    def encode_prompt(self, user_message: str, response_prefix: str = "") -> list[int]:
        return [ord(c) for c in f"<u>{user_message}<a>{response_prefix}"]

    def decode(self, token_ids: list[int]) -> str:
        return "".join(chr(t) for t in token_ids)

    def reply(self, message: str) -> str:
        if "Grade the proposed answer" in message:
            return "so so" if self.mumbles else ("<score>3</score>" if "Proposed answer: 7\n" in message
                                                 else "Wrong. <score>1</score>")
        return "Check it." if "List the errors" in message else self.answer

    def generate(self, prompts, n, max_new_tokens, temperature=1.0, top_p=1.0, greedy=False, prefixes=None):
        outputs = []
        for prompt in prompts:
            message = self.decode(prompt)[3:-3]
            self.asked.append(message)
            ids = [ord(c) for c in self.reply(message)][:max_new_tokens]
            outputs.append([Completion(ids, [-0.5] * len(ids), finished=True)])
        return outputs


def test_the_sampler_plays_each_turn_with_its_seat_and_groups_it_by_task_round_role_and_agent():
    agents = [ScriptedAgent("7"), ScriptedAgent("8"), ScriptedAgent("7", mumbles=True)]
    sampler = DiscussionSampler(agents, rounds=2, solutions=3, references=2, unparsed_penalty=-1.0)
    tasks = [dataclasses.replace(TASK, answer="SECRET"), Task("What is 1 + 1?", "SECRET", "add", 1, "add#2")]
    groups = sampler.generate(tasks, 2, max_new_tokens=16)
    turns = [s for g in groups for s in g.samples]
    assert len(turns) == 2 * 2 * 2 * 3 * 3  # tasks x discussions x rounds x exchanges x roles
    for group in groups:
        assert len({s.info["agent"] for s in group.samples}) == 1 and len({s.info["role"] for s in group.samples}) == 1
    exchanges: dict[tuple, dict[str, dict]] = {}
    for sample in turns:
        exchanges.setdefault((sample.info["discussion"], sample.info["round"], sample.info["solution"]), {})[
            sample.info["role"]] = sample.info
    assert len(exchanges) == 2 * 2 * 2 * 3
    for (discussion, r, j), seat in exchanges.items():
        task_uid, d = discussion.rsplit("#", 1)
        t = [task.uid for task in tasks].index(task_uid)
        assert tuple(seat[role]["agent"] for role in ROLES) == seats(t, r, int(d), j, 3)
        grade = seat["scorer"]["grade"]  # agent 2 cannot grade: its exchanges go unrewarded (nan)
        assert (grade is None) == (seat["scorer"]["agent"] == 2)
        if grade is not None:
            s = (grade - 1) / 2
            assert (seat["solver"]["return"], seat["evaluator"]["return"]) == (s, 1 - s)
            assert grade == (3.0 if agents[seat["solver"]["agent"]].answer == "7" else 1.0)
        else:
            assert math.isnan(seat["solver"]["return"]) and seat["scorer"]["return"] == -1.0
    # round 1's solvers saw two of round 0's answers with their reviews; nobody ever saw the answer key
    later = [m for agent in agents for m in agent.asked if "Earlier answers" in m]
    assert len(later) == 2 * 2 * 3 and all(m.count("Review: Check it.") == 2 for m in later)
    assert not any("SECRET" in m for agent in agents for m in agent.asked)


@pytest.mark.parametrize("answers, paid", [(("8", "7", "7"), 1.0), (("8", "8", "7"), 0.0)])
def test_with_consensus_scorers_are_paid_against_the_vote_over_all_the_tasks_discussions_not_the_key(answers, paid):
    # scripted scorers grade 7 high and 8 low; the key says 8. Where 7 wins each round's vote over the task's two
    # discussions, every grade agrees with it (1.0); where 8 wins, every grade disagrees (0.0)
    agents = [ScriptedAgent(answer) for answer in answers]
    task = dataclasses.replace(TASK, answer="8")
    groups = DiscussionSampler(agents, rounds=2, solutions=3, consensus=True).generate([task], 2, max_new_tokens=16)
    assert {s.info["return"] for g in groups for s in g.samples if s.info["role"] == "scorer"} == {paid}
    without = DiscussionSampler(agents, rounds=2, solutions=3).generate([task], 2, max_new_tokens=16)
    assert {s.info["return"] for g in without for s in g.samples if s.info["role"] == "scorer"} == {0.0}


def test_discussion_accuracy_takes_the_vote_of_the_last_rounds_answers():
    agents = [ScriptedAgent("8"), ScriptedAgent("7"), ScriptedAgent("7")]
    summary, records = evaluate_discussion(DiscussionSampler(agents, rounds=2, solutions=3, greedy=True), [TASK],
                                           16, 8)
    solved = [(t["round"], t["solution"], t["agent"], t["text"]) for t in records[0]["turns"] if t["role"] == "solver"]
    assert [text for *_, text in solved] == ["8", "7", "7", "7", "7", "8"]
    assert [agent for _, _, agent, _ in solved] == [0, 1, 2, 1, 2, 0]
    assert summary["accuracy"] == 1.0 and summary["first_round_accuracy"] == 1.0  # two of three say 7
    assert summary["final_share"] == pytest.approx(2 / 3) and summary["grade_parse_rate"] == 1.0
    assert records[0]["grades"] == [1.0, 3.0, 3.0, 3.0, 3.0, 1.0]
    lone = evaluate_discussion(DiscussionSampler([ScriptedAgent("8")], rounds=1, solutions=2, greedy=True), [TASK],
                               16, 8)[0]
    assert lone["accuracy"] == 0.0 and lone["final_share"] == 0.0


# ---- config -------------------------------------------------------------------------------------
@pytest.mark.parametrize("options, message", [
    (["filter.rewards=[{name: verifier}]"], "use filter.rewards=\\[{name: env}\\]"),
    (["algorithm.name=spiral"], "another algorithm than spiral"),
    (["replay.name=buffer"], "replay.name=on_policy"),
    (["curriculum.name=learnability"], "which grades are not"),
    (["discussion.agents=0"], "must be at least 1"),
    (["discussion.agents=2"], "must not be 2: of two agents one would grade or critique its own work"),
    (["discussion.solutions=0"], "must be at least 1"),
    (["discussion.grade_low=3", "discussion.grade_high=3"], "grade_low must be below"),
    (["discussion.unparsed_penalty=0.5"], "at most 0"),
    (["discussion.roles=[solver, scorer, solver]"], "give every role"),
    (["discussion.roles=[solver, evaluator]"], "one role per agent"),
    (["discussion.roles=[solver, critic, scorer]"], "name roles from"),
    (["discussion.lrs=[0.1]"], "one learning rate per agent"),
    (["discussion.lrs=[null, -1, 0]"], "0 or more"),
    (["filter.rewards=[{name: env}, {name: verifier}]"], "at most rewards that never read the key"),
])
def test_bad_discussion_settings_are_named(options, message):
    with pytest.raises((ConfigError, TrainingError), match=message):  # a range on load, a combination after
        config = load_config(None, COMAS + options)
        check_combination(config, get_algorithm(config.algorithm.name))


def test_the_recipe_and_the_single_agent_ablation_pass_the_checks():
    fixed_and_frozen = ["discussion.roles=[solver, evaluator, scorer]", "discussion.lrs=[null, 1e-4, 0]",
                        "filter.rewards=[{name: env}, {name: length, options: {max_chars: 9}}]"]
    for options in ([], ["discussion.agents=1"], fixed_and_frozen):
        config = load_config(Path(__file__).parent.parent / "recipes" / "comas.yaml", options)
        check_combination(config, get_algorithm(config.algorithm.name))
    with pytest.raises(ConfigError, match="discussion.agents"):
        load_config(None, COMAS + ["discussion.agents=two"])


# ---- a real run ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_three_agents_on_two_base_models_discuss_train_on_their_own_turns_and_resume(tmp_path):
    """The recipe (3 agents, 3 exchanges a round), shrunk to one round (the recipe test leaves it to this one),
    with two architectures in one discussion: the embedded SmolLM2 (Llama) and a Qwen2-shaped model in seat 1,
    each agent with its own weights, LoRA adapters and optimizer, exchanging text."""
    from autotelic.checkpoint import latest_checkpoint, load_checkpoint
    from autotelic.run_state import new_run_dir
    from autotelic.trainer import Trainer

    options = [
        "train.steps=2", "control.tasks_per_step=2", "generate.group_size=1", "control.max_new_tokens=12",
        "discussion.rounds=1", "discussion.grade_tokens=12",
        "curriculum.families=[add, compare]", "curriculum.levels=[1]", "eval.levels=[1]", "eval.per_level=1",
        "eval.max_new_tokens=8", "algorithm.lr=1e-3", "model.lora_rank=8",
        'discussion.models=[null, "random:qwen2-tiny", null]',
        # the base models rarely write the tagged grade: a length term makes the scorers' penalised turns differ
        "filter.rewards=[{name: env}, {name: length, options: {max_chars: 40}}]",
        "logging.progress=false", "train.max_minutes=null", "train.checkpoint_every=1",
        f"logging.runs_dir={tmp_path}", "logging.run_name=comas"]
    config = load_config(Path(__file__).parent.parent / "recipes" / "comas.yaml", options)
    assert config.generate.mode == "discussion" and config.discussion.agents == 3 and config.discussion.solutions == 3
    assert config.algorithm.beta > 0  # REINFORCE++ with its KL term
    trainer = Trainer(config, new_run_dir(config))
    kinds = [agent.causal_lm.config.model_type for agent in trainer.agents]
    assert kinds == ["llama", "qwen2", "llama"]
    initial = [{k: v.clone() for k, v in agent.trainable_state().items()} for agent in trainer.agents]
    summary = trainer.run()
    run_dir = tmp_path / "comas"
    for agent, start in zip(trainer.agents, initial):  # each agent trained on its own turns
        assert any(not torch.equal(v, start[k]) for k, v in agent.trainable_state().items())
    assert not all(torch.equal(a, b) for a, b in zip(trainer.agents[0].trainable_state().values(),
                                                     trainer.agents[2].trainable_state().values()))
    rows = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert {r["agent"] for r in rows} == {0, 1, 2} and {r["role"] for r in rows} == set(ROLES)
    exchanges: dict[tuple, dict[str, int]] = {}
    for row in rows:
        exchanges.setdefault((row["step"], row["discussion"], row["round"], row["solution"]), {})[row["role"]] = \
            row["agent"]
    assert all(len(set(seat.values())) == 3 for seat in exchanges.values())  # no agent judges its own work
    scorers = {(r["step"], r["discussion"], r["round"], r["solution"]): r for r in rows if r["role"] == "scorer"}
    for row in rows:  # every reward is the grade its exchange's scorer wrote
        reply = scorers[row["step"], row["discussion"], row["round"], row["solution"]]["completion"]
        grade = parse_tagged_score(reply, 1, 3)
        assert row["grade"] == grade
        if row["role"] == "scorer":
            length = -min(1.0, max(0, len(reply) - 40) / 40)
            assert row["reward"] == pytest.approx((0.0 if grade is not None else -1.0) + length)
        elif grade is None:
            assert row["reward"] is None and row["filter"] == "unscorable"
        else:
            s = (grade - 1) / 2
            length = -min(1.0, max(0, len(row["completion"]) - 40) / 40)
            assert row["reward"] == pytest.approx((s if row["role"] == "solver" else 1 - s) + length)
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all(f"agent{i}/train/loss" in r and f"agent{i}/train/kl" in r for r in steps if "reward/mean" in r
               for i in range(3))
    comas = summary["comas"]
    for when in ("before", "after"):  # each summary is its own records', and agent 0 alone is the run's accuracy
        records = [json.loads(line) for line in (run_dir / f"eval_{when}_discussion.jsonl").read_text().splitlines()]
        assert len(records) == summary["heldout_tasks"] and len(comas[when]["agents"]) == 3
        assert comas[when]["discussion"]["accuracy"] == pytest.approx(sum(r["final"] for r in records) / len(records))
        assert comas[when]["agents"][0] == summary[f"eval_{when}"]["accuracy"]
    assert all((run_dir / "agents" / str(i) / "config.json").is_file() for i in (1, 2))
    assert (run_dir / "model" / "config.json").is_file()
    assert "CoMAS" in (run_dir / "report.html").read_text()
    # resume: every agent's weights and optimizer come back, and the resumed trainer starts at step 2
    saved = load_checkpoint(latest_checkpoint(run_dir))
    assert len(saved["agents"]) == 2 and all(agent["optimizer"]["state"] for agent in saved["agents"])
    resumed = Trainer(load_config(run_dir / "config.yaml"), run_dir, resume=True)
    assert [agent.causal_lm.config.model_type for agent in resumed.agents] == kinds
    for agent, trained in zip(resumed.agents, trainer.agents):
        state = trained.trainable_state()  # read once: each read collects the whole adapter state
        assert all(torch.equal(v, state[k]) for k, v in agent.trainable_state().items())
    assert resumed.state.step == 2 and resumed.state.discussion_before == comas["before"]
    # and the models train on from there: one step in process (a resumed run's evaluations and exports are the
    # first run's, tested above)
    tokens = resumed.state.completion_tokens
    metrics = resumed.step()
    resumed.rollouts.stop()
    assert any(f"agent{i}/train/loss" in metrics for i in range(3)) and resumed.state.completion_tokens > tokens


def test_an_agent_at_learning_rate_0_keeps_its_weights_in_its_fixed_seat(tmp_path):
    """Four tiny agents in fixed seats, two of them scorers; the second scorer's learning rate is 0 (a steadier
    judge): after a step the first scorer has moved and the frozen one has not, and no update ran for it."""
    from autotelic.run_state import new_run_dir
    from autotelic.trainer import Trainer

    options = COMAS + [
        "model.path=random:qwen2-tiny", "model.lora=false", "discussion.agents=4", "discussion.rounds=1",
        "discussion.roles=[scorer, scorer, solver, evaluator]", "discussion.lrs=[null, 0, null, null]",
        "filter.rewards=[{name: env}, {name: length, options: {max_chars: 20}}]", "algorithm.name=reinforce_pp",
        "algorithm.lr=1e-2", "train.steps=1", "control.tasks_per_step=2", "generate.group_size=2",
        "control.max_new_tokens=6", "discussion.grade_tokens=6", "curriculum.families=[add]",
        "curriculum.levels=[1]", "eval.levels=[1]", "eval.per_level=1", "eval.max_new_tokens=4",
        "logging.progress=false", "logging.report=false", "train.export_model=false",
        f"logging.runs_dir={tmp_path}", "logging.run_name=frozen"]
    config = load_config(None, options)
    trainer = Trainer(config, new_run_dir(config))
    initial = [{k: v.clone() for k, v in agent.trainable_state().items()} for agent in trainer.agents]
    metrics = trainer.step()
    trainer.rollouts.stop()
    moved = [any(not torch.equal(v, start[k]) for k, v in agent.trainable_state().items())
             for agent, start in zip(trainer.agents, initial)]
    assert moved[0] and not moved[1], moved
    assert "agent0/train/loss" in metrics and "agent1/train/loss" not in metrics
