"""bench/self_evolution.py's CoMAS grade reliability: whether the grades of a discussion track the truth."""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))  # bench/ is scripts, not a package

from self_evolution import grade_reliability  # noqa: E402

from autotelic.tasks import get_family  # noqa: E402


def record(task, exchanges: list[tuple[str, float | None]]) -> dict:
    """A discussion record as evaluate_discussion writes it, one round: each exchange's answer, a review and the
    scorer's reply (the grade, or a reply with none)."""
    turns = [{"role": role, "round": 0, "solution": index, "text": text}
             for index, (answer, grade) in enumerate(exchanges)
             for role, text in (("solver", answer), ("evaluator", "a review"),
                                ("scorer", "no grade" if grade is None else f"Briefly so. <score>{grade:g}</score>"))]
    return {"prompt": task.prompt, "turns": turns, "grades": [grade for _, grade in exchanges]}


def test_grades_are_split_by_the_verifier_and_unreadable_ones_left_out():
    rng = random.Random(0)
    first, second = (get_family("add").generate(rng, 1) for _ in range(2))
    wrong = str(int(first.answer) + 1)
    records = [record(first, [(first.answer, 3.0), (wrong, 1.0), (wrong, None)]),
               record(second, [(second.answer, 2.0), (f"{second.answer}!", None)])]
    tasks = {task.prompt: task for task in (first, second)}
    assert grade_reliability(records, tasks, low=1, high=3) == {
        "right": {"graded": 2, "mean_reward": 0.75},  # grades 3 and 2 on a 1-3 scale: rewards 1 and 0.5
        "wrong": {"graded": 1, "mean_reward": 0.0}}


def test_a_run_whose_grades_never_parse_reports_no_mean():
    task = get_family("add").generate(random.Random(1), 1)
    assert grade_reliability([record(task, [(task.answer, None)])], {task.prompt: task}, low=1, high=3) == {
        "right": {"graded": 0, "mean_reward": None}, "wrong": {"graded": 0, "mean_reward": None}}
