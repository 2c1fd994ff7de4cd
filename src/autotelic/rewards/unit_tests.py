"""Unit-test reward: each completion's program (the task family's ``program(task, completion)``:
the solution plus the problem's tests) runs in the sandbox; 1.0 when it exits cleanly.

The group's programs run concurrently (``Sandbox.map``), each in its own process with time,
memory and process limits, no network and a fresh temporary directory.
"""

from __future__ import annotations

from autotelic.tasks import get_family
from autotelic.types import Task


class UnitTestReward:
    name = "unit_tests"

    def __init__(self, cpu_seconds: float = 5.0, wall_seconds: float = 10.0, memory_mb: int = 512,
                 workers: int | None = None):
        from autotelic.sandbox import Sandbox, SandboxLimits

        self.sandbox = Sandbox(SandboxLimits(cpu_seconds=cpu_seconds, wall_seconds=wall_seconds,
                                             memory_mb=memory_mb), workers=workers)

    def __call__(self, task: Task, completions: list[str]) -> list[float]:
        family = get_family(task.family)
        if not hasattr(family, "program"):
            raise ValueError(f"task family '{task.family}' has no unit tests (no program(task, completion))")
        results = self.sandbox.map([family.program(task, c) for c in completions])
        return [float(result.ok) for result in results]
