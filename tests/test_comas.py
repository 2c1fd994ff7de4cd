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
from autotelic.rewards.judge import parse_score
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
@pytest.mark.parametrize("reply, grade, solver", [("3", 3.0, 1.0), ("2", 2.0, 0.5), ("Grade: 1", 1.0, 0.0),
                                                  ("2.5 out of 3", 2.5, 0.75)])
def test_the_solver_earns_the_normalised_grade_the_evaluator_its_complement(reply, grade, solver):
    rewards = round_rewards(reply, 1, 3, unparsed_penalty=-1.0)
    assert rewards.grade == grade
    assert rewards.returns == (solver, 1.0 - solver, 0.0)


@pytest.mark.parametrize("reply", ["", "correct", "5", "0/3"])
def test_an_unreadable_grade_penalises_the_scorer_and_rewards_nobody_else(reply):
    for penalty in (-1.0, 0.0):
        rewards = round_rewards(reply, 1, 3, penalty)
        solver, evaluator, scorer = rewards.returns
        assert rewards.grade is None and math.isnan(solver) and math.isnan(evaluator) and scorer == penalty


# ---- roles --------------------------------------------------------------------------------------
def test_roles_rotate_so_every_agent_plays_every_role():
    for agents in (2, 3, 4):
        played = {(seats(t, r, agents)[role], role) for t in range(agents) for r in range(2) for role in range(3)}
        assert played == {(a, role) for a in range(agents) for role in range(3)}
        for r in range(agents):  # with one task, the rounds alone rotate the roles
            assert seats(0, r, agents)[SOLVER] == r % agents
    assert len(set(seats(0, 0, 3))) == 3  # three agents: three different agents in a round
    assert seats(0, 0, 2) == (0, 1, 0) and seats(0, 1, 2) == (1, 0, 1)  # two: the solver grades itself
    assert seats(5, 7, 1) == (0, 0, 0)  # one agent plays every role (the single-agent ablation)


# ---- hand-built discussions ------------------------------------------------------------------------
def _turn(agent: int, text: str, prompt: list[int], message: str = "") -> Turn:
    return Turn(agent, message, prompt, Sample(text=text, token_ids=[9, 9], logprobs=[-0.1, -0.2], finished=True))


def _round(discussion: Discussion, texts: tuple[str, str, str], prompts: list[list[int]], r: int) -> None:
    agents = seats(discussion.task_index, r, 3)
    discussion.rounds.append([_turn(a, t, p) for a, t, p in zip(agents, texts, prompts)])
    reward_round(discussion, r, 1, 3, unparsed_penalty=-1.0)


def test_the_solver_prompt_shows_every_earlier_round_and_the_other_roles_see_the_current_answer():
    discussion = Discussion(TASK, 0, 0)
    assert discussion.message(SOLVER, 1, 3) == TASK.prompt  # round 0: the task as it is
    _round(discussion, ("8", "3 + 4 is 7, not 8.", "1"), [[1]] * 3, 0)
    _round(discussion, ("7", "Correct.", "no idea"), [[1]] * 3, 1)
    discussion.rounds.append([_turn(2, "7", [1])])
    message = discussion.message(SOLVER, 1, 3)
    for text in ("Answer: 8", "Review: 3 + 4 is 7, not 8.", "Grade: 1 out of 3", "Answer: 7", "Review: Correct.",
                 "Grade: unreadable"):
        assert text in message
    assert message.startswith(TASK.prompt) and message.index("Answer: 8") < message.index("Answer: 7")
    assert "Proposed answer: 7" in discussion.message(EVALUATOR, 1, 3)
    discussion.rounds[-1].append(_turn(0, "It is right.", [1]))
    scorer = discussion.message(SCORER, 1, 3)
    assert "Proposed answer: 7" in scorer and "Review: It is right." in scorer and "from 1 (wrong) to 3" in scorer


def test_each_role_is_rewarded_from_its_round_grade_in_groups_per_agent():
    # two discussions of one task, three agents; round 1's grade is unreadable in discussion 1
    discussions = [Discussion(TASK, 0, d) for d in range(2)]
    _round(discussions[0], ("8", "Wrong.", "1"), [[1, 2, 3], [1, 4], [1, 5]], 0)
    _round(discussions[1], ("7", "Fine.", "3"), [[1, 2, 3], [1, 4, 6], [1, 5]], 0)
    _round(discussions[0], ("7", "Fine.", "2"), [[1, 7, 8], [1, 4], [1, 5]], 1)
    _round(discussions[1], ("7", "Fine.", "hmm"), [[1, 7, 9], [1, 4], [1, 5]], 1)
    groups = {(g.task.meta["round"], g.task.meta["role"], math.isfinite(g.samples[0].info["return"])): g
              for r in range(2) for role in range(3) for g in role_groups(discussions, r, role)}
    assert [s.info["return"] for s in groups[0, "solver", True].samples] == [0.0, 1.0]
    assert [s.info["return"] for s in groups[0, "evaluator", True].samples] == [1.0, 0.0]
    assert [s.info["return"] for s in groups[0, "scorer", True].samples] == [0.0, 0.0]
    assert [s.info["return"] for s in groups[1, "solver", True].samples] == [0.5]  # discussion 1's has no grade
    assert all(math.isnan(s.info["return"]) for s in groups[1, "solver", False].samples)
    assert [s.info["return"] for s in groups[1, "scorer", True].samples] == [0.0, -1.0]
    for (r, role, _), group in groups.items():  # one agent per group: the seat of that role in that round
        assert group.task.meta["agent"] == seats(0, r, 3)[ROLES.index(role)]
        assert all(s.info["agent"] == group.task.meta["agent"] and s.info["role"] == role for s in group.samples)
    # prompts that differ past a shared prefix: the rest starts the sample, masked
    solvers = groups[1, "solver", True], groups[1, "solver", False]
    assert solvers[0].prompt_ids == [1, 7, 8] and solvers[0].samples[0].loss_mask() == [1, 1]
    evaluators = groups[0, "evaluator", True]
    assert evaluators.prompt_ids == [1, 4]
    assert evaluators.samples[1].token_ids == [6, 9, 9] and evaluators.samples[1].loss_mask() == [0, 1, 1]
    assert evaluators.samples[1].logprobs == [0.0, -0.1, -0.2]
    metrics = discussion_metrics([g for g in groups.values()])
    assert metrics["discussion/grade_parse_rate"] == 0.75
    assert metrics["discussion/solver_accuracy"] == 0.75  # three of the four answers are 7
    assert metrics["discussion/solver_reward"] == pytest.approx(0.5)


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
            return "so so" if self.mumbles else ("3" if "Proposed answer: 7\n" in message else "1")
        return "Check it." if "List the errors" in message else self.answer

    def generate(self, prompts, n, max_new_tokens, temperature=1.0, top_p=1.0, greedy=False):
        outputs = []
        for prompt in prompts:
            message = self.decode(prompt)[3:-3]
            self.asked.append(message)
            ids = [ord(c) for c in self.reply(message)][:max_new_tokens]
            outputs.append([Completion(ids, [-0.5] * len(ids), finished=True)])
        return outputs


def test_the_sampler_plays_each_turn_with_its_seat_and_groups_it_by_task_round_and_role():
    agents = [ScriptedAgent("7"), ScriptedAgent("8"), ScriptedAgent("7", mumbles=True)]
    sampler = DiscussionSampler(agents, rounds=3, unparsed_penalty=-1.0)
    tasks = [dataclasses.replace(TASK, answer="SECRET"), Task("What is 1 + 1?", "SECRET", "add", 1, "add#2")]
    groups = sampler.generate(tasks, 2, max_new_tokens=16)
    assert len(groups) == 2 * 3 * 3  # tasks x rounds x roles (both discussions of a task play out alike)
    for group in groups:
        t = [task.uid for task in tasks].index(group.task.uid.split("/")[0])
        r, role = group.task.meta["round"], ROLES.index(group.task.meta["role"])
        agent = seats(t, r, 3)[role]
        assert group.task.meta["agent"] == agent and len(group.samples) == 2
        text = group.samples[0].text
        if role == SOLVER:
            assert text == agents[agent].answer
        if role == SCORER:
            grade = parse_score(text, 1, 3)
            expected = -1.0 if grade is None else 0.0
            assert [s.info["return"] for s in group.samples] == [expected, expected]
    # agent 2 cannot grade: it scores task 0's round 0 and task 1's round 2, whose answers go unrewarded (nan)
    unrewarded = {g.task.uid for g in groups if math.isnan(g.samples[0].info["return"])}
    assert unrewarded == {"add#1/r0/solver", "add#1/r0/evaluator", "add#2/r2/solver", "add#2/r2/evaluator"}
    # task 0's round 2 solver (agent 2) saw both earlier rounds; nobody ever saw the answer key
    later = [m for m in agents[2].asked if "Earlier answers" in m and "3 + 4" in m]
    assert len(later) == 2 and "1. Answer: 7" in later[0] and "2. Answer: 8" in later[0]
    assert not any("SECRET" in m for agent in agents for m in agent.asked)


def test_discussion_accuracy_takes_the_last_rounds_answer_and_reports_the_vote():
    agents = [ScriptedAgent("8"), ScriptedAgent("7"), ScriptedAgent("7")]
    summary, records = evaluate_discussion(DiscussionSampler(agents, rounds=3, greedy=True), [TASK], 16, 8)
    assert [t["text"] for t in records[0]["turns"] if t["role"] == "solver"] == ["8", "7", "7"]
    assert summary["accuracy"] == 1.0 and summary["first_round_accuracy"] == 0.0
    assert summary["majority_accuracy"] == 1.0 and summary["grade_parse_rate"] == 1.0
    assert records[0]["grades"] == [1.0, 3.0, 3.0]


# ---- config -------------------------------------------------------------------------------------
@pytest.mark.parametrize("options, message", [
    (["filter.rewards=[{name: verifier}]"], "use filter.rewards=\\[{name: env}\\]"),
    (["algorithm.name=spiral"], "another algorithm than spiral"),
    (["replay.name=buffer"], "replay.name=on_policy"),
    (["curriculum.name=learnability"], "which grades are not"),
    (["discussion.agents=0"], "must be at least 1"),
    (["discussion.grade_low=3", "discussion.grade_high=3"], "grade_low must be below"),
    (["discussion.unparsed_penalty=0.5"], "at most 0"),
])
def test_bad_discussion_settings_are_named(options, message):
    with pytest.raises((ConfigError, TrainingError), match=message):  # a range on load, a combination after
        config = load_config(None, COMAS + options)
        check_combination(config, get_algorithm(config.algorithm.name))


def test_the_recipe_and_the_single_agent_ablation_pass_the_checks():
    for options in ([], ["discussion.agents=1"]):
        config = load_config(Path(__file__).parent.parent / "recipes" / "comas.yaml", options)
        check_combination(config, get_algorithm(config.algorithm.name))
    with pytest.raises(ConfigError, match="discussion.agents"):
        load_config(None, COMAS + ["discussion.agents=two"])


# ---- a real run ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_two_agents_discuss_train_on_their_own_turns_and_resume(tmp_path):
    from autotelic.checkpoint import latest_checkpoint, load_checkpoint
    from autotelic.run_state import new_run_dir
    from autotelic.trainer import Trainer

    options = [  # the recipe (2 agents, 2 rounds), shrunk; the recipe test leaves it to this one
        "train.steps=2", "control.tasks_per_step=2", "generate.group_size=2", "control.max_new_tokens=12",
        "curriculum.families=[add, compare]", "curriculum.levels=[1]", "eval.levels=[1]", "eval.per_level=1",
        "eval.max_new_tokens=8", "algorithm.lr=1e-3", "model.lora_rank=8", "filter.drop_zero_variance=false",
        "logging.progress=false", "train.max_minutes=null", "train.checkpoint_every=1",
        f"logging.runs_dir={tmp_path}", "logging.run_name=comas"]
    config = load_config(Path(__file__).parent.parent / "recipes" / "comas.yaml", options)
    assert config.generate.mode == "discussion" and config.discussion.agents == 2 and config.discussion.rounds == 2
    trainer = Trainer(config, new_run_dir(config))
    assert len(trainer.agents) == 2
    initial = [{k: v.clone() for k, v in agent.trainable_state().items()} for agent in trainer.agents]
    summary = trainer.run()
    run_dir = tmp_path / "comas"
    for agent, start in zip(trainer.agents, initial):  # each agent trained on its own turns
        assert any(not torch.equal(v, start[k]) for k, v in agent.trainable_state().items())
    assert not all(torch.equal(a, b) for a, b in zip(trainer.agents[0].trainable_state().values(),
                                                     trainer.agents[1].trainable_state().values()))
    rows = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert {r["agent"] for r in rows} == {0, 1} and {r["role"] for r in rows} == set(ROLES)
    scorers = {(r["step"], r["discussion"], r["round"]): r for r in rows if r["role"] == "scorer"}
    for row in rows:  # every reward is the grade its round's scorer wrote
        grade = parse_score(scorers[row["step"], row["discussion"], row["round"]]["completion"], 1, 3)
        assert row["grade"] == grade
        if row["role"] == "scorer":
            assert row["reward"] == (0.0 if grade is not None else -1.0)
        elif grade is None:
            assert row["reward"] is None and row["filter"] == "unscorable"
        else:
            s = (grade - 1) / 2
            assert row["reward"] == pytest.approx(s if row["role"] == "solver" else 1 - s)
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all("agent0/train/loss" in r and "agent1/train/loss" in r for r in steps if "reward/mean" in r)
    comas = summary["comas"]
    for when in ("before", "after"):
        assert len(comas[when]["agents"]) == 2 and 0 <= comas[when]["discussion"]["accuracy"] <= 1
    assert (run_dir / "agents" / "1" / "config.json").is_file() and (run_dir / "model" / "config.json").is_file()
    assert "CoMAS" in (run_dir / "report.html").read_text()
    # resume: every agent's weights and optimizer come back, and the resumed trainer starts at step 2
    saved = load_checkpoint(latest_checkpoint(run_dir))
    assert len(saved["agents"]) == 1 and saved["agents"][0]["optimizer"]["state"]
    resumed = Trainer(load_config(run_dir / "config.yaml"), run_dir, resume=True)
    for agent, trained in zip(resumed.agents, trainer.agents):
        assert all(torch.equal(v, trained.trainable_state()[k]) for k, v in agent.trainable_state().items())
    assert resumed.state.step == 2 and resumed.state.discussion_before == comas["before"]
