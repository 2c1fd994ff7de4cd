"""HumanEval as a task family: programs assembled from completions, run against the problem's
own tests in the real sandbox (reference solutions pass, wrong or hostile ones fail)."""

import random

import pytest

from autotelic.rewards import build_reward
from autotelic.tasks import get_family
from autotelic.tasks.code import extract_code, unit_test_program

FAMILY = get_family("humaneval")


def _task(task_id: str):
    for level in FAMILY.levels:
        for problem in FAMILY.problems(level):
            if problem["task_id"] == task_id:
                rng = random.Random(0)
                while True:  # draw until this problem comes up (its level holds ~50)
                    task = FAMILY.generate(rng, level)
                    if task.answer == task_id:
                        return task, problem
    raise KeyError(task_id)


def test_levels_split_all_164_problems_and_tasks_carry_their_tests():
    assert sum(len(FAMILY.problems(level)) for level in FAMILY.levels) == 164
    task, problem = _task("HumanEval/0")
    assert problem["prompt"] in task.prompt and task.meta["entry_point"] == "has_close_elements"
    assert task.uid == "humaneval:HumanEval/0"


def test_code_extraction():
    assert extract_code("Sure:\n```python\nx = 1\n```\nDone") == "x = 1\n"
    assert extract_code("```\ny = 2\n```") == "y = 2\n"
    assert extract_code("```python\nz = 3\n") == "z = 3\n"  # cut at the length cap
    assert extract_code("return 4") == "return 4"


def test_reference_solutions_pass_and_wrong_ones_fail_in_the_sandbox():
    task, problem = _task("HumanEval/0")
    assert FAMILY.score(task, problem["canonical_solution"]) == 1.0  # body only: the prompt is prepended
    whole = problem["prompt"] + problem["canonical_solution"]
    assert FAMILY.score(task, f"Here it is:\n```python\n{whole}```") == 1.0  # the whole function restated
    assert FAMILY.score(task, "    return True\n") == 0.0
    assert FAMILY.score(task, "    while True: pass\n") == 0.0  # stopped by the sandbox's limits
    # a problem whose prompt defines a helper before the entry point: restating only the entry point works
    helper_task, helper_problem = _task("HumanEval/10")
    restated = "def make_palindrome(string: str) -> str:\n" + helper_problem["canonical_solution"]
    assert "def is_palindrome" in unit_test_program(helper_task, restated)
    assert FAMILY.score(helper_task, restated) == 1.0


def test_unit_test_reward_scores_a_group_concurrently():
    task, problem = _task("HumanEval/2")
    reward = build_reward("unit_tests", {"wall_seconds": 5.0})
    values = reward(task, [problem["canonical_solution"], "    return 0\n", "    import os; os.system('ls /')\n",
                           problem["canonical_solution"]])
    assert values == [1.0, 0.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="has no unit tests"):
        reward(get_family("add").generate(random.Random(0), 1), ["1"])
