"""Unit-test reward: each completion runs with its task's tests in the harness (``tasks/harness.py``: an early
exit is no pass, each assertion counts on its own) in the sandbox. Graded by default, the share of assertions
that held (ReST-RL's reward, whose spread the reward-std filter reads); ``graded: false`` pays 1.0 only when
every test passes. ``shown: false`` leaves out the assertions the task's prompt shows (for families that can,
``ShowsSomeTests``: pyfunc): there the docstring's example is also the first test, and an answer returning that
example's output as a constant, whatever its input, would earn 0.2 of the graded reward (bench/copied_examples.py
counts such answers). Accuracy, the task's own score, still runs every test.

The group's programs run concurrently (``Sandbox.map``), each in its own process with time,
memory and process limits, no network and a fresh temporary directory.
"""

from __future__ import annotations

from autotelic.tasks import get_family
from autotelic.tasks.harness import ShowsSomeTests, Tested, families_showing_some_tests
from autotelic.types import Task


class UnitTestReward:
    name = "unit_tests"

    def __init__(self, cpu_seconds: float = 5.0, wall_seconds: float = 10.0, memory_mb: int = 512,
                 workers: int | None = None, graded: bool = True, shown: bool = True):
        from autotelic.sandbox import Sandbox, SandboxLimits

        self.sandbox = Sandbox(SandboxLimits(cpu_seconds=cpu_seconds, wall_seconds=wall_seconds,
                                             memory_mb=memory_mb), workers=workers)
        self.graded = graded
        self.shown = shown

    def __call__(self, task: Task, completions: list[str]) -> list[float]:
        family = get_family(task.family)
        if not isinstance(family, Tested):
            raise ValueError(f"task family '{task.family}' has no unit tests (a tests(task, completion) method "
                             "and a runs_code attribute, tasks/harness.py's Tested)")
        run_tests = family.tests
        if not self.shown:
            if not isinstance(family, ShowsSomeTests):
                telling = ", ".join(families_showing_some_tests())
                raise ValueError(f"unit_tests with shown: false needs tasks that say which tests their prompt shows "
                                 f"({telling}'s do); task family '{task.family}' does not: drop shown: false for it")
            run_tests = family.unshown_tests
        runs = [run_tests(task, completion) for completion in completions]
        verdicts = [run.verdict(result) for run, result in zip(runs, self.sandbox.map([r.program for r in runs]))]
        return [v.fraction if self.graded else float(v.passed_all) for v in verdicts]

