"""Guardrails for self-evolution (guardrails.py): each signal on groups a collapsing run produces, scored by the
families' real verifiers, and a real test-time run that raises an alarm, prints it, lists it in its summary and
report and keeps the guardrails' state across a resume."""

from __future__ import annotations

import json
import random

import pytest
from rows import verified

from autotelic.config import GuardrailsConfig
from autotelic.guardrails import CREATOR_VALIDITY, Guardrails
from autotelic.tasks import get_family
from autotelic.types import Group, Sample, Task


def _observe(guard: Guardrails, step: int, groups: list[Group], metrics: dict[str, float] | None = None
             ) -> tuple[dict[str, float], list[str]]:
    """The step's metrics with the guardrails' added, and the alarm lines it raised."""
    metrics = dict(metrics or {})
    guard.observe(step, groups, metrics)
    return metrics, guard.raised


def _group(task: Task, texts: list[str], rewards: list[float]) -> Group:
    return Group(task, [], [Sample(text, [], [], True, reward=r) for text, r in zip(texts, rewards)])


def _created(prompt: str, parent: str) -> Task:
    return Task(prompt, "", "add", 1, f"evo/{prompt}", meta={"created_by": "evolver", "parent_prompt": parent})


def test_near_copies_of_their_parents_raise_the_novelty_alarm_after_patience_steps():
    guard = Guardrails(GuardrailsConfig(patience=2, min_prompt_novelty=0.2), label_free=False)
    parent = "A farmer has 12 cows and buys 7 more cows at the market. How many cows does he have now?"
    fresh = _created("A train leaves at noon carrying 40 people; 13 get off at the first stop. How many remain?",
                     parent)
    metrics, lines = _observe(guard, 1, [_group(fresh, ["27", "27"], [1.0, 1.0])])
    assert metrics["guard/prompt_novelty"] > 0.9 and metrics["guard/prompt_duplicates"] == 0 and not lines
    copies = [_created(parent.upper(), parent), _created(f"Now: {parent}", parent)]  # what a decayed evolver writes
    for step, copy in enumerate(copies, 2):
        metrics, lines = _observe(guard, step, [_group(copy, ["20", "21"], [0.0, 1.0])])
        assert metrics["guard/prompt_novelty"] < 0.2 and metrics["guard/prompt_duplicates"] == 1.0
    assert metrics["guard/alarm"] == 1.0 and len(lines) == 1 and lines[0].startswith(
        "guardrail alarm at step 3: prompt novelty")
    assert [(a["step"], a["signal"]) for a in guard.alarms] == [(3, "prompt novelty")]
    # a prompt drawn again is not new: nothing to measure, and the spell below is not reset
    metrics, lines = _observe(guard, 4, [_group(copies[0], ["20", "20"], [1.0, 1.0])])
    assert "guard/prompt_novelty" not in metrics and not lines and metrics["guard/alarm"] == 0.0


def test_a_majority_vote_agreeing_on_wrong_answers_shows_in_label_and_reward_accuracy():
    family, rng = get_family("add"), random.Random(0)
    tasks = [family.generate(rng, 1) for _ in range(3)]
    wrong = [str(int(t.answer) + 1) for t in tasks]
    # the vote pays the wrong majority; the one right answer of each group gets 0
    groups = [_group(t, [w, w, w, t.answer], [1.0, 1.0, 1.0, 0.0]) for t, w in zip(tasks, wrong)]
    guard = Guardrails(GuardrailsConfig(patience=1), label_free=True)
    metrics, lines = _observe(guard, 1, groups)
    assert metrics["guard/label_accuracy"] == 0.0 and metrics["guard/reward_accuracy"] == 0.0
    assert metrics["guard/completion_diversity"] == pytest.approx(2 / 4)
    assert len(lines) == 1 and "label accuracy 0.00 < 0.2" in lines[0]
    right = [_group(t, [t.answer, t.answer, w, w + "0"], [1.0, 1.0, 0.0, 0.0]) for t, w in zip(tasks, wrong)]
    metrics, _ = _observe(guard, 2, right)
    assert metrics["guard/label_accuracy"] == 1.0 and metrics["guard/reward_accuracy"] == 1.0
    # a reward that reads the answer (the verifier) needs no check; neither does a task without an answer
    assert "guard/label_accuracy" not in _observe(Guardrails(GuardrailsConfig(), label_free=False), 1, groups)[0]
    created = [_group(_created("What is 2 + 2?", ""), ["5", "5"], [1.0, 1.0])]
    assert "guard/label_accuracy" not in _observe(Guardrails(GuardrailsConfig(), label_free=True), 1, created)[0]


def test_creator_validity_comes_from_the_creator_and_a_threshold_of_zero_turns_an_alarm_off():
    guard = Guardrails(GuardrailsConfig(patience=1), label_free=False)
    metrics, lines = _observe(guard, 1, [], {CREATOR_VALIDITY: 0.1})
    assert metrics["guard/creator_validity"] == 0.1 and "creator validity 0.10 < 0.2" in lines[0]
    quiet = Guardrails(GuardrailsConfig(patience=1, min_creator_validity=0.0), label_free=False)
    assert _observe(quiet, 1, [], {CREATOR_VALIDITY: 0.1})[1] == []
    assert _observe(Guardrails(GuardrailsConfig(enabled=False), label_free=False), 1, [], {CREATOR_VALIDITY: 0.1}) == \
        ({CREATOR_VALIDITY: 0.1}, [])


@pytest.mark.slow
def test_a_ttrl_run_raises_the_label_alarm_prints_it_reports_it_and_resumes_with_it(tmp_path, capsys):
    from autotelic.loading import load_config
    from autotelic.trainer import Trainer, resume, train

    # a threshold no 135M model's vote meets on these tasks: the alarm must fire on the first measured step
    config = load_config("recipes/ttrl.yaml", [
        "train.export_model=false",  # the report is read below
        "train.steps=1", "control.tasks_per_step=2", "generate.group_size=4", "control.max_new_tokens=8",
        "eval.per_level=1", "eval.levels=[1]", "eval.max_new_tokens=8", "curriculum.families=[add]",
        "guardrails.min_label_accuracy=1.0", "guardrails.patience=1", f"logging.runs_dir={tmp_path}",
        "logging.run_name=ttrl", "logging.progress=true", "model.lora=true", "model.lora_rank=8"])
    summary = train(config)
    run_dir = tmp_path / "ttrl"
    (row,) = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if '"guard/' in line]
    # the step's groups as rollouts.jsonl logged them, checked afresh by the family's verifier
    rollouts = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    groups = [rollouts[i:i + 4] for i in range(0, len(rollouts), 4)]
    right = [[verified(r) >= 1.0 for r in group] for group in groups]
    best = [oks[max(range(4), key=lambda i: group[i]["reward"])] for group, oks in zip(groups, right)]
    agree = [(r["reward"] >= 0.5) == ok for group, oks in zip(groups, right) for r, ok in zip(group, oks)]
    assert len(groups) == 2 and row["guard/label_accuracy"] == pytest.approx(sum(best) / len(best))
    assert row["guard/label_accuracy"] < 1.0
    assert row["guard/reward_accuracy"] == pytest.approx(sum(agree) / len(agree))
    assert row["guard/alarm"] == 1.0
    assert [a["signal"] for a in summary["guardrail_alarms"]] == ["label accuracy"]
    err = capsys.readouterr().err
    assert "guardrail alarm at step 1: label accuracy" in err
    report = (run_dir / "report.html").read_text()
    assert "Guardrail alarms" in report and "label accuracy" in report
    # trained on its evaluation prompts (test time), and said so everywhere its accuracy is reported
    assert summary["heldout_kind"] == "test_time" and summary["heldout_tasks"] == 1
    assert json.loads((run_dir / "summary.json").read_text())["heldout_kind"] == "test_time"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows and all(row["heldout_kind"] == "test_time" for row in rows)
    assert "Test-time (trained on the evaluation prompts" in report
    resumed = Trainer(load_config(run_dir / "config.yaml"), run_dir, resume=True)
    assert resumed.guardrails.alarms == summary["guardrail_alarms"]
    assert resume(run_dir, ["train.steps=2"])["steps"] == 2
