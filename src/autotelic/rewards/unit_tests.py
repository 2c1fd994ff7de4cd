"""Unit-test reward: each completion runs with its task's tests in the harness (``tasks/harness.py``: an early
exit is no pass, each assertion counts on its own) in the sandbox. Graded by default, the share of assertions
that held (ReST-RL's reward, whose spread the reward-std filter reads); ``graded: false`` pays 1.0 only when
every test passes.

The group's programs run concurrently (``Sandbox.map``), each in its own process with time,
memory and process limits, no network and a fresh temporary directory.
"""

from __future__ import annotations

from autotelic.tasks import get_family
from autotelic.tasks.harness import Tested
from autotelic.types import Task


class UnitTestReward:
    name = "unit_tests"

    def __init__(self, cpu_seconds: float = 5.0, wall_seconds: float = 10.0, memory_mb: int = 512,
                 workers: int | None = None, graded: bool = True):
        from autotelic.sandbox import Sandbox, SandboxLimits

        self.sandbox = Sandbox(SandboxLimits(cpu_seconds=cpu_seconds, wall_seconds=wall_seconds,
                                             memory_mb=memory_mb), workers=workers)
        self.graded = graded

    def __call__(self, task: Task, completions: list[str]) -> list[float]:
        family = get_family(task.family)
        if not isinstance(family, Tested):
            raise ValueError(f"task family '{task.family}' has no unit tests (no tests(task, completion))")
        runs = [family.tests(task, completion) for completion in completions]
        verdicts = [run.verdict(result) for run, result in zip(runs, self.sandbox.map([r.program for r in runs]))]
        return [v.fraction if self.graded else float(v.passed_all) for v in verdicts]
