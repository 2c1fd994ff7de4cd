"""Memory replay (curricula/memory.py): solved problems banked with the policy's own best answer, retrieved by
similarity into later prompts; the base curriculum sees the plain groups only; a real run banks and serves."""

from __future__ import annotations

import json

import pytest

from autotelic.curricula.bandit import BanditCurriculum
from autotelic.curricula.memory import MemoryCurriculum, bag_of_words, cosine
from autotelic.heldout import HeldOut
from autotelic.types import Group, Sample, Task


def _group(task: Task, answers: list[tuple[str, float]]) -> Group:
    return Group(task, [1], [Sample(text, [2], [0.0], True, reward=r) for text, r in answers])


def _bandit() -> BanditCurriculum:
    return BanditCurriculum(["add", "compare"], [1], seed=0, heldout=HeldOut(()))


def test_similar_questions_are_nearer_than_other_kinds():
    question = bag_of_words("What is 12 + 30? Reply with only the number.")
    assert cosine(question, bag_of_words("What is 4 + 9? Reply with only the number.")) > cosine(
        question, bag_of_words("Which is larger, 17 or 71? Reply with only the larger number."))
    assert cosine(question, question) == pytest.approx(1.0)


def test_solved_problems_come_back_as_the_nearest_examples_with_the_policys_own_answer():
    memory = MemoryCurriculum(_bandit(), fraction=1.0, examples=1, min_reward=1.0)
    first = memory.next_tasks(4)
    assert not any("solved before" in t.prompt for t in first)  # an empty memory serves plain tasks
    solved, failed = first[0], first[1]
    metrics = memory.observe([_group(solved, [("the answer is 42", 1.0), ("41", 0.0)]),
                              _group(failed, [("7", 0.0), ("8", 0.0)])])
    assert metrics["memory/size"] == 1.0 and list(memory.bank.items()) == [(solved.prompt, "the answer is 42")]
    served = memory.next_tasks(4)
    assert all(t.meta["memory"] and t.uid.endswith("#memory") for t in served if t.prompt != solved.prompt)
    example = f"Problem: {solved.prompt}\nYour solution: the answer is 42"
    for task in served:
        if task.prompt.endswith(solved.prompt):  # its own question is never its own example
            assert example not in task.prompt
        else:
            assert task.prompt.startswith("Problems you solved before:\n\n" + example)
            assert task.prompt.endswith("Now this problem:\n" + task.prompt.split("Now this problem:\n")[1])
    plain_before = [arm.pass_rate for arm in memory.base.arms]
    memory.observe([_group(t, [("x", 1.0)]) for t in served if t.meta.get("memory")])
    assert [arm.pass_rate for arm in memory.base.arms] == plain_before  # served groups never reach the base curriculum


def test_the_bank_keeps_the_newest_problems_and_is_checkpointed():
    memory = MemoryCurriculum(_bandit(), fraction=0.5, examples=2, capacity=2, max_chars=5)
    tasks = memory.next_tasks(3)
    for task in tasks:
        memory.observe([_group(task, [(f"answer to {task.uid}", 1.0)])])
    assert list(memory.bank) == [t.prompt for t in tasks[1:]] and all(len(a) == 5 for a in memory.bank.values())
    restored = MemoryCurriculum(_bandit(), fraction=0.5, examples=2, capacity=2, max_chars=5)
    restored.load_state_dict(json.loads(json.dumps(memory.state_dict())))
    assert restored.bank == memory.bank
    assert [t.prompt for t in restored.next_tasks(6)] == [t.prompt for t in memory.next_tasks(6)]


def test_a_mode_without_questions_refuses_memory_in_one_line():
    from autotelic.checks import TrainingError, check_run
    from autotelic.loading import load_config

    config = load_config(None, ["generate.mode=selfplay", "generate.env=textarena", "curriculum.memory.fraction=0.5"])
    with pytest.raises(TrainingError, match="curriculum.memory.fraction writes into the questions"):
        check_run(config)


@pytest.mark.slow
def test_a_run_banks_solved_problems_and_serves_them_in_later_prompts(tmp_path):
    from autotelic.loading import load_config
    from autotelic.trainer import resume, train

    overrides = ["curriculum.families=[compare]", "curriculum.levels=[1]", "eval.levels=[1]", "eval.per_level=2",
                 "train.steps=2", "control.tasks_per_step=4", "generate.group_size=4", "control.max_new_tokens=12",
                 "curriculum.memory.fraction=0.5", "curriculum.memory.min_reward=0.5", "train.checkpoint_every=1",
                 "filter.drop_zero_variance=false", "model.lora=true", "logging.progress=false",
                 "train.export_model=false", "logging.report=false", "curriculum.memory.at_eval=true",
                 f"logging.runs_dir={tmp_path}", "logging.run_name=memory"]
    summary = train(load_config(None, overrides))
    run = tmp_path / "memory"
    # at_eval: the held-out tasks again, served with the bank's problems, records keyed as eval_after.jsonl's
    plain, recalled = ([json.loads(line) for line in (run / f"{name}.jsonl").read_text().splitlines()]
                       for name in ("eval_after", "eval_after_memory"))
    assert [r["prompt"] for r in recalled] == [r["prompt"] for r in plain]
    served = [r for r in recalled if r["served_prompt"].startswith("Problems you solved before:")]
    assert len(served) == summary["memory_eval"]["served"] == len(recalled)  # compare questions: all alike
    examples = {line.removeprefix("Problem: ") for r in served for line in r["served_prompt"].splitlines()
                if line.startswith("Problem: ")}
    assert examples and not examples & {r["prompt"] for r in plain}  # training problems only
    assert all(r["served_prompt"].endswith(r["prompt"]) for r in served)
    assert summary["memory_eval"]["accuracy"] == pytest.approx(sum(r["correct"] for r in recalled) / len(recalled))
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if '"reward/mean"' in line]
    assert steps[0]["memory/size"] >= 1  # picking the larger of two numbers: solved from the start
    rollouts = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    served = [r for r in rollouts if r["prompt"].startswith("Problems you solved before:")]
    assert served and all(r["step"] >= 2 for r in served) and "memory/served_reward_mean" in steps[-1]
    resume(run, ["train.steps=3"])
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if '"reward/mean"' in line]
    assert len(steps) == 3 and steps[2]["memory/size"] >= steps[1]["memory/size"]  # the bank came back
    assert steps[2]["memory/served_total"] > steps[1]["memory/served_total"] > 0


@pytest.mark.slow
def test_a_memory_kept_only_for_deployment_leaves_training_as_it_was(tmp_path):
    """``at_eval`` with ``fraction`` 0 banks what the run solves but serves none of it in training: the run's
    steps and weights-only held-out answers are the run's without memory, and only the held-out set is answered
    again with the bank's examples."""
    from autotelic.loading import load_config
    from autotelic.trainer import train

    overrides = ["curriculum.families=[compare]", "curriculum.levels=[1]", "eval.levels=[1]", "eval.per_level=2",
                 "train.steps=2", "control.tasks_per_step=4", "generate.group_size=4", "control.max_new_tokens=12",
                 "curriculum.memory.min_reward=0.5", "filter.drop_zero_variance=false", "model.lora=true",
                 "logging.progress=false", "train.export_model=false", "logging.report=false",
                 f"logging.runs_dir={tmp_path}"]
    kept = train(load_config(None, [*overrides, "logging.run_name=kept", "curriculum.memory.at_eval=true"]))
    plain = train(load_config(None, [*overrides, "logging.run_name=plain"]))

    def read(run: str, name: str) -> list[dict]:
        return [json.loads(line) for line in (tmp_path / run / f"{name}.jsonl").read_text().splitlines()]

    for name in ("rollouts", "eval_after"):
        assert read("kept", name) == read("plain", name)
    losses = [[(m["train/loss"], m["train/grad_norm"]) for m in read(run, "metrics") if "train/loss" in m]
              for run in ("kept", "plain")]
    assert losses[0] and losses[0] == losses[1]
    steps = [m for m in read("kept", "metrics") if "memory/size" in m]
    assert steps[-1]["memory/size"] >= 1 and steps[-1]["memory/served_total"] == 0
    assert "memory_eval" not in plain and kept["memory_eval"]["served"] == 2  # compare questions: all alike
    assert all(r["served_prompt"].startswith("Problems you solved before:") for r in read("kept", "eval_after_memory"))
