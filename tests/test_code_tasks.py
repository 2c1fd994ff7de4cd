"""HumanEval as a task family: programs assembled from completions, run against the problem's
own tests in the real sandbox (reference solutions pass, wrong or hostile ones fail)."""

import random
from pathlib import Path

import pytest

from autotelic.rewards import build_reward
from autotelic.tasks import get_family
from autotelic.tasks.code import INSTRUCTION, extract_code, unit_tests

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
    assert FAMILY.score(task, task.meta["columns"]["solution"]) == 1.0  # the reference as a reply, for guidance
    assert FAMILY.score(task, "    while True: pass\n") == 0.0  # stopped by the sandbox's limits
    # a problem whose prompt defines a helper before the entry point: restating only the entry point works
    helper_task, helper_problem = _task("HumanEval/10")
    restated = "def make_palindrome(string: str) -> str:\n" + helper_problem["canonical_solution"]
    assert "def is_palindrome" in unit_tests(helper_task, restated).program
    assert FAMILY.score(helper_task, restated) == 1.0


def test_unit_test_reward_scores_a_group_concurrently():
    task, problem = _task("HumanEval/2")
    reward = build_reward("unit_tests", {"wall_seconds": 5.0})
    values = reward(task, [problem["canonical_solution"], "    return 0\n", "    import os; os.system('ls /')\n",
                           problem["canonical_solution"]])
    assert values == [1.0, 0.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="has no unit tests"):
        reward(get_family("add").generate(random.Random(0), 1), ["1"])


# --- pyfunc: procedural functions from a template bank -------------------------------------------

PYFUNC = get_family("pyfunc")


def _pyfunc_task_per_template(level: int, seed: int = 0) -> dict[str, object]:
    """One task of every template of the level (drawn until each has come up)."""
    from autotelic.tasks.code import pyfunc_templates

    keys, rng, tasks = {t.key for t in pyfunc_templates(level)}, random.Random(seed), {}
    for _ in range(5000):
        task = PYFUNC.generate(rng, level)
        tasks.setdefault(task.meta["key"].split(":", 1)[1].split("(")[0], task)
        if len(tasks) == len(keys):
            break
    assert set(tasks) == keys
    return tasks


def test_pyfunc_every_possible_task_has_tests_that_a_constant_answer_fails():
    import itertools

    from autotelic.tasks.code import pyfunc_cases, pyfunc_key, pyfunc_templates

    for level in PYFUNC.levels:
        for template in pyfunc_templates(level):
            names = [name for name, _ in template.params]
            for values in itertools.product(*(choices for _, choices in template.params)):
                consts = dict(zip(names, values))
                cases = pyfunc_cases(template, consts, pyfunc_key(level, template, consts))  # raises if not
                assert len(cases) == 5 and len({repr(out) for _, out in cases}) > 1


def test_pyfunc_reference_solutions_pass_and_wrong_ones_fail_for_every_template():
    reward = build_reward("unit_tests", {"wall_seconds": 5.0, "graded": False})
    for level in PYFUNC.levels:
        for key, task in _pyfunc_task_per_template(level).items():
            answers = [task.answer, task.meta["columns"]["solution"], "    return 0\n"]
            assert reward(task, answers) == [1.0, 1.0, 0.0], key


def test_pyfunc_prompt_is_a_humaneval_style_stub_with_an_example():
    task = PYFUNC.generate(random.Random(3), 1)
    stub, entry_point = task.meta["prompt"], task.meta["entry_point"]
    assert task.prompt == INSTRUCTION + "```python\n" + stub + "```"
    assert stub.startswith(f"def {entry_point}(x: int) -> int:\n    \"\"\"") and f"    >>> {entry_point}(" in stub
    example = stub.split(">>> ")[1].split("\n")[0].replace(entry_point, "candidate", 1)
    assert f"    assert {example} == " in task.meta["test"].splitlines()[1]  # the example is the first test
    assert task.answer.strip() not in stub and task.answer.startswith("    return ")
    restated = f"Sure:\n```python\n{stub}{task.answer}```\nThis adds."  # the whole function restated
    assert PYFUNC.score(task, restated) == 1.0
    wrong_name = restated.replace(f"def {entry_point}(", "def other_name(")
    assert PYFUNC.score(task, wrong_name) == 0.0


def test_pyfunc_graded_without_the_shown_example_pays_nothing_for_copying_its_output():
    """The docstring's example is also the first test: an answer returning its output as a constant earns 0.2 of
    the graded reward, and nothing once the shown test is left out; the reference earns 1.0 either way."""
    task = PYFUNC.generate(random.Random(2), 1)  # x - 6: no two inputs share an output
    shown_output = task.meta["prompt"].split(">>> ")[1].splitlines()[1].strip()
    signature = task.meta["prompt"].split('"""')[0]
    copy = f"```python\n{signature}    return {shown_output}\n```"
    assert task.meta["unshown_test"] == "def check(candidate):\n" + "".join(task.meta["test"].splitlines(True)[2:])
    graded = build_reward("unit_tests", {"wall_seconds": 5.0})
    unshown = build_reward("unit_tests", {"wall_seconds": 5.0, "shown": False})
    assert graded(task, [copy, task.answer]) == [0.2, 1.0]
    assert unshown(task, [copy, task.answer]) == [0.0, 1.0]
    assert PYFUNC.score(task, copy) == 0.0 and PYFUNC.score(task, task.answer) == 1.0  # accuracy runs every test
    humaneval_task, _ = _task("HumanEval/0")
    with pytest.raises(ValueError, match="family 'humaneval' does not: drop shown: false"):
        unshown(humaneval_task, ["pass"])


def test_a_run_refuses_shown_false_for_families_that_do_not_say_which_tests_their_prompts_show():
    from autotelic.checks import TrainingError, check_run
    from autotelic.loading import load_config

    unshown = ["filter.rewards=[{name: unit_tests, options: {shown: false}}]", "model.path=random:qwen2-tiny"]
    with pytest.raises(TrainingError, match="family 'humaneval' does not say which those are"):
        check_run(load_config(None, [*unshown, "curriculum.families=[pyfunc,humaneval]"]))
    check_run(load_config(None, [*unshown, "curriculum.families=[pyfunc]"]))
    falsy = ["filter.rewards=[{name: unit_tests, options: {shown: 0}}]", "model.path=random:qwen2-tiny"]
    # a falsy shown is refused as the reward reads it, not only the literal false
    with pytest.raises(TrainingError, match="family 'humaneval' does not say which those are"):
        check_run(load_config(None, [*falsy, "curriculum.families=[humaneval]"]))
    # a user's code data, read with the run's own column names, is refused in the same one line
    mbpp = Path(__file__).resolve().parent.parent / "recipes" / "data" / "mbpp-sample.jsonl"
    with pytest.raises(TrainingError, match=f"family 'file:{mbpp}' does not say which those are"):
        check_run(load_config(None, [*unshown, f"curriculum.families=[file:{mbpp}]",
                                     "curriculum.columns={prompt: text, tests: test_list}"]))


def test_pyfunc_tasks_are_deterministic_and_many_per_level():
    for level in PYFUNC.levels:
        first = [PYFUNC.generate(random.Random(7), level) for _ in range(3)]
        again = [PYFUNC.generate(random.Random(7), level) for _ in range(3)]
        assert [(t.prompt, t.meta, t.uid) for t in first] == [(t.prompt, t.meta, t.uid) for t in again]
        rng = random.Random(level)
        tasks = [PYFUNC.generate(rng, level) for _ in range(3000)]
        assert len({t.uid for t in tasks}) >= 200
        by_uid = {}
        for task in tasks:  # one uid, one function: the same tests whatever name was drawn
            assert by_uid.setdefault(task.uid, task.meta["test"]) == task.meta["test"]
    from autotelic.heldout import heldout_tasks

    heldout = heldout_tasks(["pyfunc"], [1, 2, 3], 16, seed=11)
    assert len(heldout) == 48 and len({t.uid for t in heldout}) == 48


def test_unit_test_reward_scores_a_mixed_pyfunc_group():
    task = _pyfunc_task_per_template(2)["sum_plus"]
    whole = task.meta["prompt"] + task.answer
    completions = [task.answer, "    return sum(nums)\n", f"```python\n{whole}```", "    while True: pass\n",
                   "```python\nthis is not python\n```"]
    strict = build_reward("unit_tests", {"cpu_seconds": 1.0, "wall_seconds": 2.0, "graded": False})
    assert strict(task, completions) == [1.0, 0.0, 1.0, 0.0, 0.0]
    # graded (the default): the share of the five assertions that held; summing the first three numbers only is
    # right for the two three-number cases
    graded = build_reward("unit_tests", {"cpu_seconds": 1.0, "wall_seconds": 2.0})
    first_three = task.answer.replace("sum(nums)", "sum(nums[:3])")
    assert graded(task, completions + [first_three]) == [1.0, 0.0, 1.0, 0.0, 0.0, 0.4]


def test_an_early_exit_is_no_pass_and_tests_are_graded_by_assertion():
    """A solution that exits before its tests used to leave status 0, which read as correct. In the harness an
    exit, a crash or a forged verdict passes nothing; each assertion is counted on its own."""
    from autotelic.sandbox import run_python
    from autotelic.tasks.harness import Verdict, harness

    task = PYFUNC.generate(random.Random(3), 1)
    exits = ["import sys\nsys.exit(0)\n", "exit()\n", "import os\nos._exit(0)\n", "raise SystemExit\n",
             "import sys\nsys.stdout.close()\n", "print('0123456789abcdef0123456789abcdef 5 5 1')\n"]
    for body in exits:
        completion = f"```python\n{body}```"
        assert PYFUNC.score(task, completion) == 0.0, body
        assert build_reward("unit_tests", {})(task, [completion]) == [0.0], body
    tests = ("def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(2) == 4, 'twice'\n"
             "    for x in range(3):\n        assert candidate(x) == 2 * x\n\ncheck(f)\n")
    for solution, passed, finished in [("def f(x): return 2 * x", 5, True), ("def f(x): return x + 1", 2, True),
                                       ("def f(x): raise ValueError", 0, True), ("def f(x: return", 0, False)]:
        run = harness(solution, tests)
        verdict = run.verdict(run_python(run.program))
        assert (verdict.passed, verdict.asserts, verdict.finished) == (passed, 5 if finished else 3, finished)
        assert verdict.passed_all == (passed == 5) and verdict.fraction == passed / verdict.asserts
    # an exit after some asserts in a loop held is no full marks: inside an assertion it fails that one, outside
    # one the tests stopped early, and what they would have asserted next counts as failed
    counting = ("def f(x):\n    f.calls = getattr(f, 'calls', 0) + 1\n    if f.calls > {}: raise SystemExit(0)\n"
                "    return 2 * x\n")
    run = harness(counting.format(4), tests)
    assert run.verdict(run_python(run.program)) == Verdict(4, 5, True)
    looped = "for x in range(3):\n    y = f(x)\n    assert y == 2 * x\n"
    run = harness(counting.format(2), looped)
    verdict = run.verdict(run_python(run.program))
    assert verdict == Verdict(2, 3, False) and verdict.fraction == pytest.approx(2 / 3)
    # a main block does not run (the solution is not __main__), so it cannot exit before the tests
    run = harness("def f(x):\n    return 2 * x\nif __name__ == '__main__':\n    raise SystemExit(0)\n", tests)
    assert run.verdict(run_python(run.program)).passed_all
    with pytest.raises(ValueError, match="not valid Python"):
        harness("def f(x): return x", "assert (")


def test_unittest_tests_count_each_test_method_and_fail_closed():
    """BigCodeBench-style tests define TestCase classes and run none: each test method (class fixtures included)
    is run and counted as one assertion, so a wrong solution no longer passes by the tests never running."""
    from autotelic.sandbox import run_python
    from autotelic.tasks.harness import harness

    tests = ("import unittest\n\nclass TestCases(unittest.TestCase):\n"
             "    @classmethod\n    def setUpClass(cls):\n        cls.base = 2\n"
             "    def test_one(self):\n        self.assertEqual(f(1), 2)\n"
             "    def test_two(self):\n        assert f(2) == 4\n"
             "    def test_many(self):\n        for x in range(3):\n            self.assertEqual(f(x), self.base * x)\n"
             "    def helper(self):\n        pass\n")
    for solution, passed, finished in [("def f(x): return 2 * x", 3, True), ("def f(x): return x + 1", 1, True),
                                       ("def f(x): raise SystemExit(0)", 0, True), ("def f(x: return", 0, False)]:
        run = harness(solution, tests)
        verdict = run.verdict(run_python(run.program))
        assert (verdict.passed, verdict.asserts, verdict.finished) == (passed, 3, finished), solution
        assert verdict.passed_all == (passed == 3)
