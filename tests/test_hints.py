"""Guided rollouts (curricula/hints.py): hints cut from reference solutions, queued for failed groups, a decaying
share of each step; and a real run on data with a solution column."""

from __future__ import annotations

import dataclasses
import json
from collections import deque

import pytest

from autotelic.config import ConfigError
from autotelic.curricula.hints import HintCurriculum, hint_of, hinted
from autotelic.curricula.prefixes import prefix_task
from autotelic.types import Group, Sample, Task

SOLUTION = "Add the ones: 3 + 4 = 7.\nAdd the tens: 20 + 50 = 70.\nSo the sum is 77."


def test_a_hint_is_the_first_share_of_the_reference_never_all_of_it():
    assert hint_of(SOLUTION, 0.5) == "Add the ones: 3 + 4 = 7.\nAdd the tens: 20 + 50 = 70.\n"  # ceil(1.5) lines
    assert hint_of(SOLUTION, 0.99) == hint_of(SOLUTION, 0.5)  # at most all lines but the last
    assert hint_of("the answer is 77", 0.5) == "the answer "  # one line: words
    assert hint_of("77", 0.5) == ""  # nothing short of the whole answer: no hint


class Fixed:
    """A base curriculum that serves the same tasks and records what it observes."""

    def __init__(self, tasks: list[Task]):
        self.tasks, self.observed = tasks, []

    def next_tasks(self, count: int) -> list[Task]:
        return self.tasks[:count]

    def observe(self, groups: list[Group]) -> dict[str, float]:
        self.observed.append([g.task.uid for g in groups])
        return {}

    def mix(self) -> dict[str, float]:
        return {}

    def estimated_pass_rate(self, task: Task) -> float:
        return 0.5

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def _task(uid: str, solution: str | None) -> Task:
    return Task(f"prompt {uid}", "77", "file:x", 1, uid, meta={"columns": {"solution": solution} if solution else {}})


def _group(task: Task, rewards: list[float]) -> Group:
    return Group(task, [1], [Sample("x", [2], [0.0], True, reward=r) for r in rewards])


def test_failed_groups_come_back_hinted_in_a_decaying_share_of_each_step():
    tasks = [_task("a", SOLUTION), _task("b", SOLUTION), _task("c", None)]
    base = Fixed(tasks)
    hints = HintCurriculum(base, fraction=0.5, decay=0.5, queue=deque())
    metrics = hints.observe([_group(tasks[0], [0.0, 0.0]), _group(tasks[1], [1.0, 0.0]), _group(tasks[2], [0.0])])
    assert metrics["hint/made"] == 1 and metrics["hint/fraction"] == 0.5  # a solved, c has no reference
    (queued,) = hints.queue
    assert queued.uid == "a#hinted" and queued.meta["hinted"] and not queued.response_prefix
    assert queued.prompt == "prompt a\n\nHint: a solution starts like this:\n" + hint_of(SOLUTION, 0.5).rstrip()
    served = hints.next_tasks(4)  # round(0.25 x 4) = 1 hinted task, the rest from the base
    assert [t.uid for t in served] == ["a#hinted", "a", "b", "c"]
    metrics = hints.observe([_group(served[0], [1.0, 0.0]), _group(served[1], [0.0, 0.0])])
    assert base.observed[-1] == ["a"]  # the base sees unhinted groups only
    assert metrics["hint/reward_mean"] == 0.5 and metrics["hint/fraction"] == 0.25
    restored = HintCurriculum(Fixed(tasks), fraction=0.5, queue=deque())
    restored.load_state_dict(hints.state_dict())
    assert restored.fraction == pytest.approx(0.125) and list(restored.queue) == list(hints.queue)


def test_failed_episodes_come_back_unchanged_for_one_episode_to_demonstrate():
    """mode=demonstration: the failed task is queued as it was, its whole reference to be played by one episode
    of its group; the demonstration's reward is reported apart from the sampled episodes'."""
    solution = 'click("Oak Board")\nanswer("12.00")'
    task = _task("a", solution)
    hints = HintCurriculum(Fixed([task]), fraction=1.0, mode="demonstration", queue=deque())
    assert hints.observe([_group(task, [0.0, 0.0])])["hint/made"] == 1
    (queued,) = hints.queue
    assert (queued.uid, queued.prompt, queued.meta["demonstration"]) == ("a#demonstrated", task.prompt,
                                                                          solution.splitlines())
    played = Group(queued, [1], [Sample("x", [2], [0.0], True, reward=1.0, info={"demonstration": True}),
                                 Sample("y", [3], [0.0], True, reward=0.0)])
    metrics = hints.observe([played])
    assert metrics["hint/demonstration_reward"] == 1.0 and metrics["hint/reward_mean"] == 0.0
    assert metrics["hint/made"] == 0  # a demonstrated group is not queued again


def test_a_code_reference_is_demonstrated_with_its_indentation():
    """Only blank lines around a reference are dropped: a function body's first line keeps its indentation (it once
    lost it, so every code demonstration was a syntax error that scored 0)."""
    task = _task("f", "\n    return x + 1\n    \n")
    hints = HintCurriculum(Fixed([task]), fraction=1.0, mode="demonstration", queue=deque())
    hints.observe([_group(task, [0.0, 0.0])])
    assert hints.queue[0].meta["demonstration"] == ["    return x + 1"]


def test_a_failed_partial_solution_prompt_is_not_guided():
    """A ReST-GRPO prefix task's reply continues its cut; the reference, a whole solution, would follow the cut as a
    second solution (the code recipe has both), so only the problem as posed is guided. A reply that only starts
    with a fixed prefix (the web tasks' "Action:") is guided: the reference follows that prefix on every turn."""
    task = _task("f", "def f(x):\n    return x + 1\n")
    web = dataclasses.replace(task, uid="w", response_prefix="Action:")
    hints = HintCurriculum(Fixed([task]), fraction=1.0, mode="demonstration", queue=deque())
    assert hints.observe([_group(prefix_task(task, "def f(x):"), [0.0, 0.0])])["hint/made"] == 0
    assert hints.observe([_group(task, [0.0, 0.0]), _group(web, [0.0, 0.0])])["hint/made"] == 2


def test_with_a_stuck_window_only_families_stuck_at_zero_are_guided():
    """stuck_window=2: a family is guided while neither of its last 2 unguided groups was solved; once one is,
    its failed tasks stay unguided and its queued retries are dropped, until 2 more failures make it stuck again."""
    def task(family: str, uid: str) -> Task:
        return Task(f"prompt {uid}", "77", family, 1, uid)

    succ, add = task("successor", "s"), task("add", "a")
    hints = HintCurriculum(Fixed([succ, add]), column="answer", fraction=1.0, mode="demonstration",
                           stuck_window=2, queue=deque())
    metrics = hints.observe([_group(succ, [0.0, 0.0]), _group(add, [0.0, 0.0])])
    assert metrics["hint/made"] == 2 and metrics["hint/stuck_families"] == 2
    metrics = hints.observe([_group(add, [1.0, 0.0]), _group(succ, [0.0, 0.0])])
    assert metrics["hint/stuck_families"] == 1 and metrics["hint/made"] == 1  # successor's retry only
    assert [t.uid for t in hints.queue] == ["s#demonstrated", "s#demonstrated"]  # add's earlier retry dropped
    assert hints.observe([_group(add, [0.0, 0.0])])["hint/made"] == 0  # add's solved group is still in its window
    restored = HintCurriculum(Fixed([succ, add]), column="answer", fraction=1.0, mode="demonstration",
                              stuck_window=2, queue=deque())
    restored.load_state_dict(hints.state_dict())
    for guided in (hints, restored):  # a second failure pushes the solved group out of add's window of 2
        assert guided.observe([_group(add, [0.0, 0.0])])["hint/made"] == 1
        assert guided.solved["add"] == deque([False, False])


def test_demonstrations_need_samples_or_episodes():
    from autotelic.checks import TrainingError, check_run
    from autotelic.loading import load_config

    guided = ["curriculum.hints.fraction=0.5", "curriculum.hints.mode=demonstration"]
    check_run(load_config(None, [*guided, "curriculum.hints.column=answer"]))  # the default recipe's sample mode
    config = load_config(None, [*guided, "generate.mode=tree"])
    with pytest.raises(TrainingError, match="curriculum.hints.mode=demonstration .* needs generate.mode=sample or "
                                            "episode, not tree"):
        check_run(config)
    with pytest.raises(ConfigError, match="curriculum.hints.mode must be one of prompt, demonstration"):
        check_run(load_config(None, ["curriculum.hints.mode=replay"]))
    with pytest.raises(ConfigError, match="curriculum.hints.stuck_window must be 0 or more, got -1"):
        check_run(load_config(None, ["curriculum.hints.stuck_window=-1"]))


def test_a_chat_prompt_gets_the_hint_in_its_last_user_message():
    task = Task("system: Be brief.\nuser: What is 7 x 11?", "77", "file:x", 1, "q", messages=(
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 7 x 11?"}))
    messages = hinted(task, "7 x 11 = 7 x 10 + 7").messages
    assert messages[0] == task.messages[0]
    assert messages[1]["content"] == "What is 7 x 11?\n\nHint: a solution starts like this:\n7 x 11 = 7 x 10 + 7"


@pytest.mark.slow
def test_a_run_retries_failed_tasks_from_their_solutions_start(tmp_path):
    from autotelic.loading import load_config
    from autotelic.trainer import train

    rows = [{"prompt": f"What is {a} x {b} + 13? Reply with only the number.", "answer": str(a * b + 13),
             "solution": f"{a} x {b} = {a * b}\n{a * b} + 13 = {a * b + 13}"} for a, b in ((17, 23), (19, 31))]
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    train(load_config(None, [
        "train.export_model=false", "logging.report=false", 
        f"curriculum.families=[file:{data}]", "curriculum.name=uniform", "curriculum.levels=[1]",
        "eval.families=[add]", "eval.levels=[1]", "eval.per_level=1", "train.steps=2", "control.tasks_per_step=2",
        "generate.group_size=2", "control.max_new_tokens=8", "curriculum.hints.fraction=1.0",
        "curriculum.hints.decay=0.5", "filter.drop_zero_variance=false", "model.lora=true",
        "logging.progress=false", f"logging.runs_dir={tmp_path}", "logging.run_name=hints"]))
    steps = [json.loads(line) for line in (tmp_path / "hints" / "metrics.jsonl").read_text().splitlines()
             if '"reward/mean"' in line]
    assert [s["hint/fraction"] for s in steps] == [1.0, 0.5]
    rollouts = [json.loads(line) for line in (tmp_path / "hints" / "rollouts.jsonl").read_text().splitlines()]
    with_hints = [r for r in rollouts if "Hint:" in r["prompt"]]
    assert steps[0]["hint/made"] >= 1 and with_hints and all(r["step"] == 2 for r in with_hints)
    hints = {r["prompt"] + "\n\nHint: a solution starts like this:\n" + r["solution"].splitlines()[0] for r in rows}
    assert all(r["prompt"] in hints for r in with_hints)  # the first line of the solution, after the question
    assert "hint/reward_mean" in steps[1]


@pytest.mark.slow
def test_a_demonstrated_task_gets_its_answer_as_the_last_sample_with_the_policys_logprobs(embedded_dir):
    """mode=demonstration in sample mode: a failed task comes back with its reference (``column=answer``: the
    task's own answer) as one of its group's samples, scored and trained like the others."""
    import random

    import torch

    from autotelic.backends.hf import HFPolicy
    from autotelic.config import ModelConfig
    from autotelic.curricula.hints import demonstrated, reference_of
    from autotelic.rollout.filter import verifier_reward
    from autotelic.rollout.generate import PolicySampler
    from autotelic.tasks import get_family

    policy = HFPolicy(ModelConfig(path=str(embedded_dir)), seed=0)
    plain = get_family("successor").generate(random.Random(0), 1)
    task = demonstrated(plain, reference_of(plain, "answer"))
    groups = PolicySampler(policy, temperature=0.7).generate([plain, task], 4, 12)
    assert [len(g.samples) for g in groups] == [4, 4]  # the demonstration is one of the group's samples
    shown = groups[1].samples[-1]
    assert shown.info == {"demonstration": True} and shown.text == plain.answer and shown.finished
    assert not any(s.info.get("demonstration") for s in groups[0].samples + groups[1].samples[:-1])
    assert verifier_reward(task, shown.text) == 1.0
    expected, _ = policy.completion_logprobs([groups[1].prompt_ids], [shown.token_ids], 1, 0.7)
    assert torch.allclose(torch.tensor(shown.logprobs), expected[0, :len(shown.token_ids)], atol=1e-4)
    assert all(lp < 0 for lp in shown.logprobs)
    long = demonstrated(plain, "1 2 3 4 5 6 7 8 9 10 11 12 13 14")
    cut = PolicySampler(policy, temperature=0.7).generate([long], 2, 6)[0].samples[-1]
    assert len(cut.token_ids) == 6 and not cut.finished  # cut at the cap, as a sampled reply would be
